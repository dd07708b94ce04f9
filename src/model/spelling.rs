//! The nearest known name to a misspelt one, for errors that say "did you mean …".

/// The candidate closest to `word` by edit distance, if close enough to be a likely misspelling:
/// at most a third of the word's length (and at least 2) edits, ignoring case and `-`/`_`.
pub(crate) fn nearest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace(['-', '_'], "");
    let w = norm(word);
    let limit = (w.chars().count() / 3).max(2);
    candidates
        .into_iter()
        .map(|c| (strsim::damerau_levenshtein(&w, &norm(c)), c))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, c)| (*d, *c))
        .map(|(_, c)| c)
}

/// `; did you mean "x"?`, or nothing.
pub(crate) fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    nearest(word, candidates).map(|c| format!("; did you mean {c:?}?")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_names_are_suggested_and_far_ones_are_not() {
        let fields = ["command", "args", "resources", "image", "env"];
        assert_eq!(nearest("comand", fields), Some("command"));
        assert_eq!(nearest("request", ["requests", "limits", "claims"]), Some("requests"));
        assert_eq!(nearest("cpus", ["cpu", "memory", "nvidia.com/gpu"]), Some("cpu"));
        assert_eq!(nearest("Resources", fields), Some("resources"));
        assert_eq!(nearest("workdir", ["workingDir", "command"]), None);
        assert_eq!(nearest("zzzzzz", fields), None);
        assert_eq!(did_you_mean("imgae", fields), "; did you mean \"image\"?");
        assert_eq!(did_you_mean("zzzzzz", fields), "");
    }
}
