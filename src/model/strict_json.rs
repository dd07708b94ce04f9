//! Decoding embedded documents (pod specs, services, ingresses) strictly: a field the type does
//! not know is refused with its full path and the nearest known name, instead of being dropped
//! as Kubernetes' own types do.
//!
//! Unknown fields are found while decoding ([`serde_ignored`]); only when one is, the fields the
//! type knows at that place are read from its `Deserialize` impl by [`known_fields`], which
//! drives the impl down the path and captures the field list it declares.

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Visitor,
};
use std::cell::Cell;

/// One step of a path into a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// A field or map key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// `containers[0].comand`, from the document's top.
pub(crate) fn path_text(path: &[Step]) -> String {
    let mut out = String::new();
    for s in path {
        match s {
            Step::Key(k) if out.is_empty() => out.push_str(k),
            Step::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Why a document was refused: the path of the field (`.` for the whole document) and the
/// problem.
pub(crate) type Refusal = (String, String);

/// Decodes `text` as `T`, refusing unknown fields; decode errors are left to `fallback` (which
/// reads the document again to name the failing field).
pub(crate) fn parse_strict<T: DeserializeOwned>(
    text: &[u8],
    fallback: impl FnOnce(&[u8]) -> Result<T, Refusal>,
) -> Result<T, Refusal> {
    let mut unknown: Option<Vec<Step>> = None;
    let mut de = serde_json::Deserializer::from_slice(text);
    let decoded: Result<T, _> = serde_ignored::deserialize(&mut de, |p| {
        if unknown.is_none() {
            unknown = Some(steps(&p));
        }
    });
    let value = match decoded.and_then(|v| de.end().map(|()| v)) {
        Ok(v) => v,
        Err(_) => return fallback(text),
    };
    match unknown {
        None => Ok(value),
        Some(path) => Err(unknown_field::<T>(&path)),
    }
}

/// The refusal of the unknown field at `path`.
fn unknown_field<T: DeserializeOwned>(path: &[Step]) -> Refusal {
    let (parent, name) = match path.split_last() {
        Some((Step::Key(k), parent)) => (parent, k.as_str()),
        _ => return (path_text(path), "is not a field here".to_string()),
    };
    let hint = match known_fields::<T>(parent) {
        Some(fields) => super::spelling::nearest(name, fields.iter().copied())
            .map(|n| format!("; did you mean {n:?}?"))
            .unwrap_or_else(|| format!(" (known here: {})", fields.join(", "))),
        None => String::new(),
    };
    (path_text(path), format!("unknown field {name:?}{hint}"))
}

fn steps(p: &serde_ignored::Path<'_>) -> Vec<Step> {
    use serde_ignored::Path;
    let mut out = Vec::new();
    let mut cur = p;
    loop {
        cur = match cur {
            Path::Root => break,
            Path::Seq { parent, index } => {
                out.push(Step::Index(*index));
                parent
            }
            Path::Map { parent, key } => {
                out.push(Step::Key(key.clone()));
                parent
            }
            Path::Some { parent } | Path::NewtypeStruct { parent } | Path::NewtypeVariant { parent } => parent,
        };
    }
    out.reverse();
    out
}

/// The field names `T` declares for the struct at `path` inside it, if a struct is there.
pub(crate) fn known_fields<T: DeserializeOwned>(path: &[Step]) -> Option<&'static [&'static str]> {
    let found = Cell::new(None);
    // The probe always ends in an error, once it found the struct or could not go on.
    let _ = T::deserialize(Probe { path, found: &found });
    found.get()
}

type ProbeError = de::value::Error;

/// A deserializer that holds no data: it walks a type's `Deserialize` impl down `path` and
/// records the field list of the struct it ends at.
struct Probe<'a> {
    path: &'a [Step],
    found: &'a Cell<Option<&'static [&'static str]>>,
}

impl<'a> Probe<'a> {
    fn stop() -> ProbeError {
        de::Error::custom("probe")
    }

    fn entry<'de, V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        match self.path.split_first() {
            Some((Step::Key(k), rest)) => {
                visitor.visit_map(OneEntry { key: Some(k), value: Probe { path: rest, found: self.found } })
            }
            _ => Err(Self::stop()),
        }
    }
}

impl<'de, 'a> Deserializer<'de> for Probe<'a> {
    type Error = ProbeError;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeError> {
        Err(Self::stop())
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ProbeError> {
        if self.path.is_empty() {
            self.found.set(Some(fields));
            return Err(Self::stop());
        }
        self.entry(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        self.entry(visitor)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        match self.path.split_first() {
            Some((Step::Index(_), rest)) => {
                visitor.visit_seq(OneElement { value: Some(Probe { path: rest, found: self.found }) })
            }
            _ => Err(Self::stop()),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ProbeError> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(self, _: &'static str, visitor: V) -> Result<V::Value, ProbeError> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf unit
        unit_struct tuple tuple_struct enum identifier ignored_any
    }
}

/// A map of one entry: the next step's key, then the probe for its value.
struct OneEntry<'a> {
    key: Option<&'a str>,
    value: Probe<'a>,
}

impl<'de, 'a> MapAccess<'de> for OneEntry<'a> {
    type Error = ProbeError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, ProbeError> {
        match self.key.take() {
            Some(k) => seed.deserialize(k.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, ProbeError> {
        seed.deserialize(Probe { path: self.value.path, found: self.value.found })
    }
}

/// A sequence of one element: the probe for the next step.
struct OneElement<'a> {
    value: Option<Probe<'a>>,
}

impl<'de, 'a> SeqAccess<'de> for OneElement<'a> {
    type Error = ProbeError;

    fn next_element_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<Option<S::Value>, ProbeError> {
        match self.value.take() {
            Some(p) => seed.deserialize(p).map(Some),
            None => Ok(None),
        }
    }
}

/// Parses JSON; on failure returns the path of the offending field (`.` for the whole text)
/// and the message. The path is only tracked when parsing fails, so good input costs nothing
/// extra.
pub(crate) fn parse_json<T: DeserializeOwned>(text: &[u8]) -> Result<T, (String, String)> {
    match serde_json::from_slice(text) {
        Ok(v) => Ok(v),
        Err(_) => {
            let mut de = serde_json::Deserializer::from_slice(text);
            let v: T = serde_path_to_error::deserialize(&mut de)
                .map_err(|e| (e.path().to_string(), e.into_inner().to_string()))?;
            de.end().map_err(|e| (".".to_string(), e.to_string()))?;
            Ok(v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;

    fn refusal(doc: serde_json::Value) -> Refusal {
        let text = serde_json::to_vec(&doc).unwrap();
        match parse_strict::<PodSpec>(&text, |_| Err((".".into(), "not decodable".into()))) {
            Ok(_) => panic!("accepted {doc}"),
            Err(r) => r,
        }
    }

    #[test]
    fn misspelt_fields_are_refused_with_their_path_and_the_nearest_name() {
        let r = refusal(serde_json::json!({"containers": [{"name": "m", "comand": ["true"]}]}));
        assert_eq!(r, ("containers[0].comand".into(), "unknown field \"comand\"; did you mean \"command\"?".into()));
        let r = refusal(serde_json::json!({"containers": [{"name": "m", "resources": {"request": {"cpu": "1"}}}]}));
        assert_eq!(r.0, "containers[0].resources.request");
        assert!(r.1.ends_with("did you mean \"requests\"?"), "{}", r.1);
        // Deeper, inside an option and a second list element.
        let r = refusal(
            serde_json::json!({"containers": [{"name": "a"}, {"name": "b", "env": [{"name": "X", "valeu": "1"}]}]}),
        );
        assert_eq!(r, ("containers[1].env[0].valeu".into(), "unknown field \"valeu\"; did you mean \"value\"?".into()));
        // Nothing close: the names known there.
        let r = refusal(serde_json::json!({"containers": [{"name": "m", "resources": {"zzzzzzzz": 1}}]}));
        assert!(r.1.starts_with("unknown field \"zzzzzzzz\" (known here: ") && r.1.contains("limits"), "{}", r.1);
        // At the top.
        let r = refusal(serde_json::json!({"containers": [{"name": "m"}], "nodeSelectr": {}}));
        assert_eq!(r, ("nodeSelectr".into(), "unknown field \"nodeSelectr\"; did you mean \"nodeSelector\"?".into()));
    }

    #[test]
    fn known_fields_and_free_maps_are_accepted() {
        let doc = serde_json::json!({
            "containers": [{"name": "m", "command": ["sh"], "resources": {"requests": {"cpu": "1", "anything/custom": "2"}}}],
            "nodeSelector": {"any-label": "x"},
        });
        let spec: PodSpec = parse_strict(&serde_json::to_vec(&doc).unwrap(), |_| panic!("decodes")).unwrap();
        assert_eq!(spec.containers[0].command.as_deref(), Some(&["sh".to_string()][..]));
    }

    #[test]
    fn decode_errors_go_to_the_fallback() {
        let got = parse_strict::<PodSpec>(br#"{"containers": 3}"#, |_| Err(("containers".into(), "wrong".into())));
        assert_eq!(got.unwrap_err(), ("containers".to_string(), "wrong".to_string()));
    }

    #[test]
    fn the_probe_finds_nested_structs_and_nothing_else() {
        let container = known_fields::<PodSpec>(&[Step::Key("containers".into()), Step::Index(0)]).unwrap();
        assert!(container.contains(&"command") && container.contains(&"image"));
        assert!(known_fields::<PodSpec>(&[]).unwrap().contains(&"containers"));
        // A free map (labels) and a path that is not there.
        assert_eq!(known_fields::<PodSpec>(&[Step::Key("nodeSelector".into())]), None);
        assert_eq!(known_fields::<PodSpec>(&[Step::Key("nosuch".into())]), None);
    }
}
