//! The placeholders the shipped example configurations put where a secret goes, refused by
//! the server's and the agent's configuration checks.

use super::FieldError;

/// What the shipped example configurations put where a secret goes.
pub(crate) const PLACEHOLDER_PREFIX: &str = "replace-with-";

/// Refuses a secret still set to an example's placeholder: a cluster started from the examples
/// as shipped would share its secrets with everyone who read them.
pub(crate) fn refuse(key: &str, value: &str) -> Result<(), FieldError> {
    if value.trim().to_ascii_lowercase().starts_with(PLACEHOLDER_PREFIX) {
        return Err(FieldError::new(
            key,
            format!(
                "still holds the example's placeholder {value:?}: set a long random value of your own (for example \
                 the output of `openssl rand -hex 32`)"
            ),
        ));
    }
    Ok(())
}
