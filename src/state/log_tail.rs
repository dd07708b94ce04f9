//! The last bytes of a run's output that its record keeps.

/// Most of a run's output its record keeps (the last bytes).
pub const MAX_LOG_TAIL: usize = 64 * 1024;

/// The last `limit` bytes of `s` at most, starting on a character.
pub fn last_bytes(s: &str, limit: usize) -> &str {
    if s.len() <= limit {
        return s;
    }
    let mut start = s.len() - limit;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}
