//! The floors of the house, held by a test: each top-level module of the library sits on a layer
//! and may import only modules on lower layers. A module that imports a peer or a module above
//! it (the scheduler importing the state, the state importing the API, the REST API importing
//! gRPC) fails `a_layer_imports_only_layers_below_it`, naming the file and the import; a new
//! top-level module fails it until it is given a layer here. docs/architecture.md draws the same
//! table.
//!
//! Tests may reach up (a unit test of the state may build a scheduler config through the
//! service), so test code is left out: files under a `tests/` folder, `tests.rs` files, and what
//! follows a file's `#[cfg(test)] mod`.

/// The layers, lowest first; a module may import the modules of the layers before its own.
const LAYERS: &[&[&str]] = &[
    // Plain data and pure parts that import nothing of Convoy's.
    &["model", "disk_space", "thread_cpu", "certs", "config_file", "chaos"],
    // The pure scheduler; the agent, which needs only the domain types and the HTTP contract.
    &["scheduler", "agent"],
    // Frozen formats, the process's instruments, the offline simulator.
    &["record", "metrics", "simulate"],
    // The deterministic state machine.
    &["state"],
    // Its tables on disk; the configuration (which checks values against the state's limits).
    &["store", "config"],
    // Raft's adapter around the state machine and its log.
    &["raft"],
    // The handle every request and loop shares: state, writer, cluster view, relay to the leader.
    &["control"],
    // What Convoy does for a caller, whatever the transport.
    &["service"],
    // The transports, peers over the service.
    &["api", "grpc"],
    // The web UI (it renders its JSON errors as the REST API does).
    &["ui"],
    // `convoy server`: wiring every part together.
    &["server"],
];

#[cfg(test)]
mod tests {
    use super::LAYERS;
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    fn layer_of(module: &str) -> Option<usize> {
        LAYERS.iter().position(|layer| layer.contains(&module))
    }

    /// Every `.rs` file under `dir`, except test code.
    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).expect("src is readable").flatten().collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let path = e.path();
            let name = e.file_name().to_string_lossy().to_string();
            if path.is_dir() {
                if name != "tests" {
                    sources(&path, out);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                out.push(path);
            }
        }
    }

    /// The code of a file without its comments and without its test module.
    fn code(text: &str) -> String {
        // An inline test module ends what is checked; `mod tests;` (a file of its own) does not.
        let inline_tests = text
            .match_indices("\n#[cfg(test)]\nmod ")
            .find(|(at, m)| text[at + m.len()..].lines().next().is_some_and(|l| l.trim_end().ends_with('{')));
        let text = &text[..inline_tests.map_or(text.len(), |(at, _)| at)];
        text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
    }

    /// The top-level modules a piece of code names through `crate::`, including each of a
    /// group (`crate::{a::x, b}`).
    fn imported(code: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let (mut depth, mut start) = (0usize, 0usize);
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            out.insert(ident(group[start..i].trim()));
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            out.insert(ident(group[start..i].trim()));
                            start = i + 1;
                        }
                        _ => {}
                    }
                }
            } else {
                out.insert(ident(rest));
            }
        }
        out.retain(|m| !m.is_empty());
        out
    }

    #[test]
    fn a_layer_imports_only_layers_below_it() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let mut wrong = Vec::new();
        for file in &files {
            let rel = file.strip_prefix(&src).expect("under src");
            let top =
                rel.components().next().map(|c| c.as_os_str().to_string_lossy().trim_end_matches(".rs").to_string());
            let Some(top) = top else { continue };
            if matches!(top.as_str(), "lib" | "main" | "cli" | "layers") {
                // The binary's own modules stand above the library; lib.rs only declares.
                continue;
            }
            let Some(own) = layer_of(&top) else {
                wrong.push(format!("src/{top} has no layer: give it one in src/layers.rs"));
                continue;
            };
            let text = std::fs::read_to_string(file).expect("a source file is readable");
            for module in imported(&code(&text)) {
                if module == top {
                    continue;
                }
                match layer_of(&module) {
                    Some(l) if l < own => {}
                    Some(_) => {
                        wrong.push(format!("{} imports crate::{module}, which is not below {top}", rel.display()))
                    }
                    None => wrong.push(format!("{} imports crate::{module}, which has no layer", rel.display())),
                }
            }
        }
        assert!(wrong.is_empty(), "imports against the layers:\n{}", wrong.join("\n"));
    }

    #[test]
    fn imports_are_read_whole_and_groups_apart() {
        let code = code(
            "use crate::model::{Job, JobId};\nuse crate::{state::State, store::{Store, StoreError}};\n\
             // crate::api is only a comment\nfn f() { crate::metrics::global(); }\n#[cfg(test)]\nmod helpers;\n\
             use crate::record::Frame;\n#[cfg(test)]\nmod tests {\n use crate::server; }",
        );
        let got: Vec<String> = imported(&code).into_iter().collect();
        assert_eq!(got, ["metrics", "model", "record", "state", "store"]);
    }

    #[test]
    fn every_layer_names_a_module_that_exists_once() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut seen = BTreeSet::new();
        for m in LAYERS.iter().flat_map(|l| l.iter()) {
            assert!(seen.insert(*m), "{m} is on two layers");
            assert!(src.join(m).is_dir() || src.join(format!("{m}.rs")).is_file(), "src/{m} does not exist");
        }
    }
}
