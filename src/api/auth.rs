//! Bearer-token authentication and the role checks of DESIGN.md §7.

use super::problem::ApiError;
use crate::config::Role;
use crate::control::Control;
use crate::model::Queue;
use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use std::sync::Arc;

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Principal {
    pub name: String,
    pub groups: Vec<String>,
    pub roles: Vec<Role>,
}

impl Principal {
    /// Refuses unless the principal has `role` (admins have every role).
    pub fn require(&self, role: Role) -> Result<(), ApiError> {
        if self.roles.contains(&Role::Admin) || self.roles.contains(&role) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!("{} lacks the {role:?} role", self.name).to_lowercase()))
        }
    }

    /// Refuses unless the principal may submit to and cancel in `queue`.
    pub fn require_queue(&self, queue: &Queue) -> Result<(), ApiError> {
        if self.roles.contains(&Role::Admin) {
            return Ok(());
        }
        self.require(Role::Submitter)?;
        let owner =
            queue.owners.iter().any(|o| o == &self.name) || queue.groups.iter().any(|g| self.groups.contains(g));
        if owner {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "{} is not an owner of queue {} (nor in one of its groups)",
                self.name, queue.name
            )))
        }
    }
}

/// Compares secrets in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl FromRequestParts<Arc<Control>> for Principal {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Arc<Control>) -> Result<Self, ApiError> {
        let auth = &app.config.auth;
        if !auth.enabled {
            return Ok(Principal { name: "anonymous".into(), groups: vec![], roles: vec![Role::Admin] });
        }
        let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
            return Err(ApiError::unauthorized("an Authorization: Bearer <token> header is required"));
        };
        let token = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).map(str::trim).unwrap_or("");
        match auth.tokens.iter().find(|t| same(t.token.as_bytes(), token.as_bytes())) {
            Some(t) => Ok(Principal { name: t.principal.clone(), groups: t.groups.clone(), roles: t.roles.clone() }),
            None => Err(ApiError::unauthorized("the bearer token is not valid")),
        }
    }
}
