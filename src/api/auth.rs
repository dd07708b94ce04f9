//! The REST API's authentication: the caller of a request as an axum extractor, over the
//! service's checks ([`crate::service::access`]).

use super::problem::ApiError;
use crate::config::Role;
use crate::control::Control;
pub(super) use crate::service::access::Principal;
use crate::service::access::{CREDENTIALS_REQUIRED, authenticate};
use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use std::marker::PhantomData;
use std::sync::Arc;

impl FromRequestParts<Arc<Control>> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<Control>) -> Result<Self, ApiError> {
        let value = match parts.headers.get(header::AUTHORIZATION) {
            None => None,
            Some(v) => match v.to_str() {
                Ok(v) => Some(v),
                Err(_) if !app.config.auth.enabled => None,
                Err(_) => return Err(ApiError::unauthorized(CREDENTIALS_REQUIRED)),
            },
        };
        Ok(authenticate(app, value)?)
    }
}

/// A role that [`Authorized`] demands.
pub(super) trait RequiredRole {
    /// The role.
    const ROLE: Role;
}

/// [`RequiredRole`]: the executor role.
pub(super) struct ExecutorRole;

impl RequiredRole for ExecutorRole {
    const ROLE: Role = Role::Executor;
}

/// [`RequiredRole`]: the admin role.
pub(super) struct AdminRole;

impl RequiredRole for AdminRole {
    const ROLE: Role = Role::Admin;
}

/// A principal with the role `R` (admins have every role). The check runs while the request's
/// parts are extracted, so before a body extractor: a caller without the role gets 403 whatever
/// the body, and learns nothing about the shape of an API it may not use.
pub(super) struct Authorized<R: RequiredRole> {
    /// The caller.
    pub principal: Principal,
    _role: PhantomData<R>,
}

impl<R: RequiredRole> FromRequestParts<Arc<Control>> for Authorized<R> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<Control>) -> Result<Self, ApiError> {
        let principal = Principal::from_request_parts(parts, app).await?;
        principal.require(R::ROLE)?;
        Ok(Authorized { principal, _role: PhantomData })
    }
}
