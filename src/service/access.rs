//! Who is calling and what they may do: bearer tokens and Basic credentials checked against
//! `[auth]`, and the role and queue-owner checks of DESIGN.md §7. Every transport authenticates
//! here (REST's `Authorization` header, gRPC's `authorization` metadata, the web UI's session).

use super::error::ServiceError;
use crate::config::Role;
use crate::control::Control;
use crate::model::Queue;

/// Who is calling.
#[derive(Debug, Clone)]
pub(crate) struct Principal {
    /// The principal's name as configured (matched against queue owners).
    pub name: String,
    /// Its groups (matched against queue groups).
    pub groups: Vec<String>,
    /// What it may do.
    pub roles: Vec<Role>,
}

/// A role as the configuration spells it (`roles = ["submitter"]`).
fn role_name(role: Role) -> &'static str {
    match role {
        Role::Admin => "admin",
        Role::Submitter => "submitter",
        Role::Executor => "executor",
    }
}

impl Principal {
    /// Refuses unless the principal has `role` (admins have every role).
    pub(crate) fn require(&self, role: Role) -> Result<(), ServiceError> {
        if self.roles.contains(&Role::Admin) || self.roles.contains(&role) {
            Ok(())
        } else {
            // The name is the operator's spelling: a message must not alter it.
            Err(ServiceError::forbidden(format!("{} lacks the {} role", self.name, role_name(role))))
        }
    }

    /// Refuses unless the principal may submit to and cancel in `queue`.
    pub(crate) fn require_queue(&self, queue: &Queue) -> Result<(), ServiceError> {
        if self.roles.contains(&Role::Admin) {
            return Ok(());
        }
        self.require(Role::Submitter)?;
        let owner =
            queue.owners.iter().any(|o| o == &self.name) || queue.groups.iter().any(|g| self.groups.contains(g));
        if owner {
            Ok(())
        } else {
            Err(ServiceError::forbidden(format!(
                "{} is not an owner of queue {} (nor in one of its groups)",
                self.name, queue.name
            )))
        }
    }
}

/// The token of an `Authorization` header value. Only the scheme is case-insensitive (RFC 9110
/// §11.1: `bearer` and `Bearer` are the same scheme); the token is taken as given.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim_start().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Compares secrets in time independent of where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The user name and password of a `Basic` authorization value (RFC 7617): base64 of
/// `name:password`. Only the scheme is case-insensitive.
fn basic_credentials(value: &str) -> Option<(String, String)> {
    let (scheme, encoded) = value.trim_start().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = String::from_utf8(base64_decode(encoded.trim())?).ok()?;
    let (name, password) = decoded.split_once(':')?;
    Some((name.to_string(), password.to_string()))
}

/// Standard base64 with padding (no crate needed for credentials of a few dozen bytes).
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let last = i == bytes.len() / 4 - 1;
        let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && !last) {
            return None;
        }
        let mut n = 0u32;
        for &c in &chunk[..4 - pad] {
            n = (n << 6) | value(c)?;
        }
        n <<= 6 * pad as u32;
        let got = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&got[..3 - pad]);
    }
    Some(out)
}

/// The message of a missing or unreadable `Authorization`.
pub(crate) const CREDENTIALS_REQUIRED: &str =
    "an Authorization: Bearer <token> header (or Basic credentials of a configured user) is required";

/// The caller named by an `Authorization` value (`Bearer <token>` or `Basic <name:password>`),
/// checked against `[auth]`; everyone is an admin when auth is off. The REST API and the gRPC API
/// (its `authorization` metadata) both authenticate here.
pub(crate) fn authenticate(app: &Control, authorization: Option<&str>) -> Result<Principal, ServiceError> {
    let auth = &app.config.auth;
    if !auth.enabled {
        return Ok(Principal { name: "anonymous".into(), groups: vec![], roles: vec![Role::Admin] });
    }
    let Some(value) = authorization else {
        return Err(ServiceError::unauthenticated(CREDENTIALS_REQUIRED));
    };
    if let Some(token) = bearer_token(value) {
        return match auth.tokens.iter().find(|t| same(t.token.as_bytes(), token.as_bytes())) {
            Some(t) => Ok(Principal { name: t.principal.clone(), groups: t.groups.clone(), roles: t.roles.clone() }),
            None => Err(ServiceError::unauthenticated("the bearer token is not valid")),
        };
    }
    if let Some((name, password)) = basic_credentials(value) {
        // Every user is compared, so the time taken does not tell which names exist.
        let found = auth.users.iter().fold(None, |found, u| {
            let ok = same(u.name.as_bytes(), name.as_bytes()) & same(u.password.as_bytes(), password.as_bytes());
            if ok { Some(u) } else { found }
        });
        return match found {
            Some(u) => Ok(Principal { name: u.name.clone(), groups: u.groups.clone(), roles: u.roles.clone() }),
            None => Err(ServiceError::unauthenticated("the user name or password is not valid")),
        };
    }
    Err(ServiceError::unauthenticated(CREDENTIALS_REQUIRED))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(name: &str, roles: &[Role]) -> Principal {
        Principal { name: name.into(), groups: vec![], roles: roles.to_vec() }
    }

    #[test]
    fn refusals_keep_the_principal_name_as_configured() {
        let e = principal("Alice-CI", &[Role::Submitter]).require(Role::Executor).unwrap_err();
        assert_eq!(e.kind, super::super::error::ErrorKind::Forbidden);
        assert_eq!(e.detail, "Alice-CI lacks the executor role");
        let mut q = Queue::new("Physics".parse().unwrap(), 1.0);
        q.owners = vec!["someone".into()];
        let e = principal("Bob", &[Role::Submitter]).require_queue(&q).unwrap_err();
        assert_eq!(e.detail, "Bob is not an owner of queue Physics (nor in one of its groups)");
        assert!(principal("Root", &[Role::Admin]).require(Role::Executor).is_ok());
    }

    #[test]
    fn basic_credentials_are_base64_of_name_colon_password() {
        // "alice:open sesame:1" and "bob:x"
        assert_eq!(
            basic_credentials("Basic YWxpY2U6b3BlbiBzZXNhbWU6MQ=="),
            Some(("alice".into(), "open sesame:1".into()))
        );
        assert_eq!(basic_credentials("basic   Ym9iOng="), Some(("bob".into(), "x".into())));
        assert_eq!(basic_credentials("Basic Ym9iOng"), None, "unpadded");
        assert_eq!(basic_credentials("Basic Ym9i"), None, "no colon");
        assert_eq!(basic_credentials("Basic Y=9iOng="), None, "padding inside");
        assert_eq!(basic_credentials("Bearer Ym9iOng="), None);
        assert_eq!(base64_decode("TWFu"), Some(b"Man".to_vec()));
        assert_eq!(base64_decode("TWE="), Some(b"Ma".to_vec()));
        assert_eq!(base64_decode("TQ=="), Some(b"M".to_vec()));
        assert_eq!(base64_decode("T==="), None);
    }

    #[test]
    fn only_the_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer Tok-EN123"), Some("Tok-EN123"));
        assert_eq!(bearer_token("bearer Tok-EN123"), Some("Tok-EN123"));
        assert_eq!(bearer_token("BEARER   Tok-EN123  "), Some("Tok-EN123"));
        assert_eq!(bearer_token("Basic Tok-EN123"), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("Bearer   "), None);
        assert_eq!(bearer_token("BearerTok-EN123"), None);
    }
}
