//! Files the client verbs read: YAML or JSON (JSON is YAML), from a path or `-` (standard
//! input), decoded into the API's types. Errors name the file, the field, and the line and column
//! in the file as the user wrote it, also for refusals the server words in terms of the JSON
//! the client sent.

use anyhow::Context;
use serde::de::{self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;
use std::io::Read;
use std::path::Path;

/// A document as the user wrote it.
pub(super) struct Doc {
    /// `jobs.yaml`, or `standard input`.
    pub name: String,
    /// Its text.
    pub text: String,
}

impl Doc {
    /// Reads `path`, or standard input for `-`.
    pub(super) fn read(path: &Path) -> anyhow::Result<Doc> {
        if path.as_os_str() == "-" {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading standard input")?;
            return Ok(Doc { name: "standard input".into(), text });
        }
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(Doc { name: path.display().to_string(), text })
    }

    /// The document as a JSON value; a syntax error says where.
    pub(super) fn value(&self) -> anyhow::Result<serde_json::Value> {
        serde_yaml_ng::from_str(&self.text).with_context(|| format!("{} is not JSON or YAML", self.name))
    }

    /// ` (jobs.yaml line 9, column 7)` for the field at `field` (`jobs[0].pod_spec.containers[0]`),
    /// or nothing when it cannot be found.
    pub(super) fn place_of(&self, field: &str) -> String {
        match locate(&self.text, field) {
            Some((line, column)) => format!(" ({} line {line}, column {column})", self.name),
            None => String::new(),
        }
    }

    /// `jobs.yaml: jobs[0].priority: … (line 4, column 15)` for an error at `field`.
    pub(super) fn error_at(&self, field: &str, message: &str) -> anyhow::Error {
        let message = without_json_place(message);
        match locate(&self.text, field) {
            Some((line, column)) => anyhow::anyhow!("{}: {field}: {message} (line {line}, column {column})", self.name),
            None => anyhow::anyhow!("{}: {field}: {message}", self.name),
        }
    }

    /// Decodes `value` (read from this document, maybe rewritten) as `T`, errors placed in it.
    pub(super) fn decode<T: DeserializeOwned>(&self, value: serde_json::Value) -> anyhow::Result<T> {
        serde_path_to_error::deserialize(value)
            .map_err(|e| self.error_at(&e.path().to_string(), &e.inner().to_string()))
    }
}

/// Reads a YAML or JSON file as `T`.
pub(super) fn read<T: DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let doc = Doc::read(path)?;
    doc.decode(doc.value()?)
}

/// A message without the ` at line 1 column 35` that points into JSON the user never saw.
pub(super) fn without_json_place(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(at) if message[at + 9..].split(" column ").all(|n| n.trim().parse::<u64>().is_ok()) => &message[..at],
        _ => message,
    }
}

/// One step of a field path: a key (which may hold dots: `nvidia.com/gpu`) or an index.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    Key(String),
    Index(usize),
}

/// `jobs[0].pod_spec.containers[0]` → its tokens.
fn tokens(field: &str) -> Vec<Token> {
    let mut out = Vec::new();
    for part in field.split('.').filter(|p| !p.is_empty()) {
        let (key, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !key.is_empty() {
            out.push(Token::Key(key.to_string()));
        }
        while let Some(end) = rest.find(']') {
            match rest[1..end].parse() {
                Ok(i) => out.push(Token::Index(i)),
                Err(_) => out.push(Token::Key(rest[1..end].to_string())),
            }
            rest = &rest[end + 1..];
        }
    }
    out
}

/// Whether a key of the document is the path's key: the same, or Armada's spelling of it
/// (`podSpec` for `pod_spec`, `jobSetId` for `job_set`).
fn same_key(written: &str, path: &str) -> bool {
    let norm = |s: &str| s.replace('_', "").to_ascii_lowercase();
    written == path || norm(written) == norm(path) || (path == "job_set" && written == "jobSetId")
}

/// The line and column (from 1) of the value at `field` in a YAML or JSON text.
fn locate(text: &str, field: &str) -> Option<(usize, usize)> {
    let path = tokens(field);
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match (Locate { path: &path }).deserialize(de) {
        Err(e) if e.to_string().contains(HERE) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }
}

/// The error a [`Locate`] raises at its target, so that the YAML parser marks where it is.
const HERE: &str = "convoy: located";

/// Walks a document down a path and fails at the value there.
struct Locate<'a> {
    path: &'a [Token],
}

impl<'de> DeserializeSeed<'de> for Locate<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Locate<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if self.path.is_empty() {
            return Err(de::Error::custom(HERE));
        }
        while let Some(key) = map.next_key::<String>()? {
            // A key may hold dots: it then stands for several tokens of the path.
            let mut taken = None;
            for n in 1..=self.path.len() {
                let joined: Option<Vec<&str>> = self.path[..n]
                    .iter()
                    .map(|t| if let Token::Key(k) = t { Some(k.as_str()) } else { None })
                    .collect();
                if joined.is_some_and(|j| same_key(&key, &j.join("."))) {
                    taken = Some(n);
                    break;
                }
            }
            match taken {
                Some(n) => return map.next_value_seed(Locate { path: &self.path[n..] }),
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let index = match self.path.first() {
            None => return Err(de::Error::custom(HERE)),
            Some(Token::Index(i)) => *i,
            Some(Token::Key(_)) => return Ok(()),
        };
        for _ in 0..index {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        seq.next_element_seed(Locate { path: &self.path[1..] }).map(|_| ())
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.scalar()
    }
}

impl Locate<'_> {
    /// At a scalar: here if the path ends, else the path is not in the document.
    fn scalar<E: de::Error>(self) -> Result<(), E> {
        if self.path.is_empty() { Err(E::custom(HERE)) } else { Ok(()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "queue: A
job_set: s
jobs:
  - priority: 1
    pod_spec:
      containers:
        - name: main
          resources:
            requests: {cpu: \"1\", nvidia.com/gpu: \"1\"}
        - name: side
          comand: [\"true\"]
";

    #[test]
    fn fields_are_found_where_the_user_wrote_them() {
        assert_eq!(locate(FILE, "jobs[0].priority"), Some((4, 15)));
        assert_eq!(locate(FILE, "jobs[0].pod_spec.containers[1].comand"), Some((11, 19)));
        assert_eq!(locate(FILE, "jobs[0].pod_spec.containers[0].resources.requests.nvidia.com/gpu"), Some((9, 50)));
        assert_eq!(locate(FILE, "jobs[0].pod_spec.containers[0]").map(|p| p.0), Some(7));
        assert_eq!(locate(FILE, "jobs[3]"), None);
        assert_eq!(locate(FILE, "nosuch"), None);
        // Armada's spellings.
        let armada = "queue: A\njobSetId: s\njobs:\n  - podSpec:\n      containers: []\n";
        assert_eq!(locate(armada, "jobs[0].pod_spec.containers"), Some((5, 19)));
        assert_eq!(locate(armada, "job_set"), Some((2, 11)));
        // JSON is YAML.
        assert_eq!(locate("{\"jobs\": [\n  {\"priority\": -1}]}", "jobs[0].priority"), Some((2, 16)));
    }

    #[test]
    fn json_places_are_dropped_and_the_users_are_given() {
        let doc = Doc { name: "jobs.yaml".into(), text: FILE.into() };
        let e = doc.error_at("jobs[0].priority", "invalid type: string \"x\", expected u32 at line 1 column 35");
        assert_eq!(
            e.to_string(),
            "jobs.yaml: jobs[0].priority: invalid type: string \"x\", expected u32 (line 4, column 15)"
        );
        assert_eq!(without_json_place("no place here"), "no place here");
        assert_eq!(without_json_place("at line one"), "at line one");
    }
}
