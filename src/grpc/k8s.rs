//! Kubernetes pod specs between protobuf and the Kubernetes JSON the rest of Convoy keeps.
//!
//! Armada's messages carry `k8s.io.api.core.v1.PodSpec` in Kubernetes' protobuf encoding. Convoy
//! stores and checks pod specs as Kubernetes JSON (the k8s-openapi types read it), so a gRPC pod
//! spec is kept encoded ([`EncodedPodSpec`]) and turned into JSON through the descriptors of
//! `proto/k8s/*.proto` (every message reachable from PodSpec, named as in Kubernetes JSON), and
//! back. The few messages whose JSON is not an object (Quantity, IntOrString, Time) and the
//! fields Kubernetes inlines into their parent (a Volume's source, a Probe's handler, ...) are
//! handled here; everything else follows from the descriptors. A field Convoy does not know is an
//! error naming it, never silently dropped.

use prost::bytes::{Buf, BufMut};
use prost::encoding::{DecodeContext, WireType, decode_varint, encode_key, encode_varint};
use prost_reflect::{
    DescriptorPool, DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value,
};
use serde_json::{Map, Value as Json};
use std::collections::HashMap;
use std::sync::LazyLock;

/// The descriptors of everything under `proto/`, compiled by `build.rs`.
static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(include_bytes!(concat!(env!("OUT_DIR"), "/descriptors.bin")).as_ref())
        .expect("build.rs wrote a valid descriptor set")
});

const CORE: &str = "k8s.io.api.core.v1";
const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";
const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";

/// Fields whose message Kubernetes JSON writes into the parent object (Go's embedded structs):
/// (message, field).
const INLINE: &[(&str, &str)] = &[
    ("Volume", "volumeSource"),
    ("Probe", "handler"),
    ("EphemeralContainer", "ephemeralContainerCommon"),
    ("ConfigMapVolumeSource", "localObjectReference"),
    ("SecretProjection", "localObjectReference"),
    ("ConfigMapProjection", "localObjectReference"),
    ("ConfigMapEnvSource", "localObjectReference"),
    ("SecretEnvSource", "localObjectReference"),
    ("ConfigMapKeySelector", "localObjectReference"),
    ("SecretKeySelector", "localObjectReference"),
];

fn is_inline(parent: &MessageDescriptor, field: &FieldDescriptor) -> bool {
    parent.package_name() == CORE && INLINE.iter().any(|(m, f)| *m == parent.name() && *f == field.name())
}

/// The descriptor of `k8s.io.api.core.v1.PodSpec`, looked up once (every submitted pod spec is
/// read against it).
pub fn pod_spec_descriptor() -> MessageDescriptor {
    static POD_SPEC: LazyLock<MessageDescriptor> = LazyLock::new(|| {
        POOL.get_message_by_name(&format!("{CORE}.PodSpec")).expect("proto/k8s/core_v1.proto declares PodSpec")
    });
    POD_SPEC.clone()
}

/// A pod spec as it came on the wire: the message's encoded fields, kept as they are until
/// [`to_json`] reads them against the descriptors.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct EncodedPodSpec(pub Vec<u8>);

impl std::fmt::Debug for EncodedPodSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncodedPodSpec({} bytes)", self.0.len())
    }
}

fn copy_bytes(from: &mut impl Buf, n: u64, to: &mut Vec<u8>) -> Result<(), prost::DecodeError> {
    let n = usize::try_from(n).map_err(|_| truncated())?;
    if from.remaining() < n {
        return Err(truncated());
    }
    to.put(from.take(n));
    Ok(())
}

#[allow(deprecated)] // prost offers no other constructor for a decoder's own errors.
fn truncated() -> prost::DecodeError {
    prost::DecodeError::new("a pod spec field runs past the end of its message")
}

impl prost::Message for EncodedPodSpec {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        buf.put_slice(&self.0);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        _ctx: DecodeContext,
    ) -> Result<(), prost::DecodeError> {
        // Re-encoded as it came: a message's encodings concatenated are the merged message.
        encode_key(tag, wire_type, &mut self.0);
        match wire_type {
            WireType::Varint => encode_varint(decode_varint(buf)?, &mut self.0),
            WireType::SixtyFourBit => copy_bytes(buf, 8, &mut self.0)?,
            WireType::ThirtyTwoBit => copy_bytes(buf, 4, &mut self.0)?,
            WireType::LengthDelimited => {
                let len = decode_varint(buf)?;
                encode_varint(len, &mut self.0);
                copy_bytes(buf, len, &mut self.0)?;
            }
            WireType::StartGroup | WireType::EndGroup => {
                #[allow(deprecated)]
                return Err(prost::DecodeError::new("pod specs have no groups"));
            }
        }
        Ok(())
    }

    fn encoded_len(&self) -> usize {
        self.0.len()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Why a pod spec could not be converted: the field (a path below the pod spec, e.g.
/// `containers[0].resources.requests.cpu`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PodSpecError {
    /// Path of the field below the pod spec (empty for the pod spec itself).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn err(field: &str, message: impl Into<String>) -> PodSpecError {
    PodSpecError { field: field.to_string(), message: message.into() }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() { name.to_string() } else { format!("{path}.{name}") }
}

/// The Kubernetes JSON of an encoded pod spec.
pub fn to_json(spec: &EncodedPodSpec) -> Result<Json, PodSpecError> {
    let msg = DynamicMessage::decode(pod_spec_descriptor(), spec.0.as_slice())
        .map_err(|e| err("", format!("is not a valid protobuf PodSpec: {e}")))?;
    message_to_json(&msg, "")
}

/// The protobuf encoding of a pod spec in Kubernetes JSON.
pub fn from_json(json: &Json) -> Result<EncodedPodSpec, PodSpecError> {
    let msg = json_to_message(json, &pod_spec_descriptor(), "")?;
    Ok(EncodedPodSpec(prost::Message::encode_to_vec(&msg)))
}

fn message_to_json(msg: &DynamicMessage, path: &str) -> Result<Json, PodSpecError> {
    let desc = msg.descriptor();
    if let Some(unknown) = msg.unknown_fields().next() {
        return Err(err(
            path,
            format!(
                "has field number {} that Convoy does not know in {} (see docs/armada-grpc.md)",
                unknown.number(),
                desc.full_name()
            ),
        ));
    }
    let text = |name: &str| msg.get_field_by_name(name).and_then(|v| v.as_str().map(str::to_string));
    match desc.full_name() {
        QUANTITY => return Ok(Json::String(text("string").unwrap_or_default())),
        INT_OR_STRING => {
            let kind = msg.get_field_by_name("type").and_then(|v| v.as_i64()).unwrap_or(0);
            return Ok(if kind == 1 {
                Json::String(text("strVal").unwrap_or_default())
            } else {
                Json::from(msg.get_field_by_name("intVal").and_then(|v| v.as_i32()).unwrap_or(0))
            });
        }
        TIME => {
            let seconds = msg.get_field_by_name("seconds").and_then(|v| v.as_i64()).unwrap_or(0);
            let t = u64::try_from(seconds).map_err(|_| err(path, "times before 1970 are not supported"))?;
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
            return Ok(Json::String(humantime::format_rfc3339_seconds(at).to_string()));
        }
        FIELDS_V1 => {
            let raw = msg.get_field_by_name("raw").and_then(|v| v.as_bytes().map(|b| b.to_vec())).unwrap_or_default();
            return serde_json::from_slice(&raw).map_err(|e| err(path, format!("raw is not JSON: {e}")));
        }
        _ => {}
    }
    let mut out = Map::new();
    for field in desc.fields() {
        if !msg.has_field(&field) {
            continue;
        }
        let here = join(path, field.name());
        let value = msg.get_field(&field);
        if is_inline(&desc, &field) {
            if let Json::Object(inner) = value_to_json(&value, &here)? {
                out.extend(inner);
            }
            continue;
        }
        out.insert(field.name().to_string(), value_to_json(&value, &here)?);
    }
    Ok(Json::Object(out))
}

fn value_to_json(value: &Value, path: &str) -> Result<Json, PodSpecError> {
    Ok(match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(n) => Json::from(*n),
        Value::I64(n) => Json::from(*n),
        Value::U32(n) => Json::from(*n),
        Value::U64(n) => Json::from(*n),
        Value::F32(n) => Json::from(f64::from(*n)),
        Value::F64(n) => Json::from(*n),
        Value::String(s) => Json::String(s.clone()),
        Value::Message(m) => message_to_json(m, path)?,
        Value::List(items) => Json::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| value_to_json(v, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ),
        Value::Map(entries) => {
            let mut sorted: Vec<_> = entries.iter().collect();
            sorted.sort_by(|a, b| a.0.cmp(b.0));
            let mut out = Map::new();
            for (k, v) in sorted {
                let MapKey::String(k) = k else { return Err(err(path, "Kubernetes maps have string keys")) };
                out.insert(k.clone(), value_to_json(v, &join(path, k))?);
            }
            Json::Object(out)
        }
        Value::Bytes(_) | Value::EnumNumber(_) => return Err(err(path, "a kind of value pod specs do not have")),
    })
}

fn json_to_message(json: &Json, desc: &MessageDescriptor, path: &str) -> Result<DynamicMessage, PodSpecError> {
    let mut msg = DynamicMessage::new(desc.clone());
    match desc.full_name() {
        QUANTITY => {
            let s = match json {
                Json::String(s) => s.clone(),
                Json::Number(n) => n.to_string(),
                _ => return Err(err(path, "a quantity is a string such as \"500m\" or \"2Gi\"")),
            };
            msg.set_field_by_name("string", Value::String(s));
            return Ok(msg);
        }
        INT_OR_STRING => {
            match json {
                Json::String(s) => {
                    msg.set_field_by_name("type", Value::I64(1));
                    msg.set_field_by_name("strVal", Value::String(s.clone()));
                }
                Json::Number(n) => {
                    let n = n.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(|| err(path, "out of range"))?;
                    msg.set_field_by_name("type", Value::I64(0));
                    msg.set_field_by_name("intVal", Value::I32(n));
                }
                _ => return Err(err(path, "must be a number or a string")),
            }
            return Ok(msg);
        }
        TIME => {
            let s = json.as_str().ok_or_else(|| err(path, "a time is an RFC 3339 string"))?;
            let at = humantime::parse_rfc3339_weak(s).map_err(|e| err(path, format!("not an RFC 3339 time: {e}")))?;
            let secs = at.duration_since(std::time::UNIX_EPOCH).map_err(|_| err(path, "before 1970"))?.as_secs();
            msg.set_field_by_name("seconds", Value::I64(i64::try_from(secs).map_err(|_| err(path, "out of range"))?));
            return Ok(msg);
        }
        FIELDS_V1 => {
            let raw = serde_json::to_vec(json).map_err(|e| err(path, e.to_string()))?;
            msg.set_field_by_name("raw", Value::Bytes(raw.into()));
            return Ok(msg);
        }
        _ => {}
    }
    let Json::Object(object) = json else { return Err(err(path, "must be an object")) };
    // Keys of inlined messages, by the inline field that holds them.
    let mut inlined: HashMap<String, Map<String, Json>> = HashMap::new();
    for (key, value) in object {
        if value.is_null() {
            continue;
        }
        let here = join(path, key);
        if let Some(field) = desc.get_field_by_name(key).filter(|f| !is_inline(desc, f)) {
            msg.set_field(&field, json_to_value(value, &field, &here)?);
            continue;
        }
        let holder =
            desc.fields().find(|f| is_inline(desc, f) && f.kind().as_message().is_some_and(|m| accepts(m, key)));
        match holder {
            Some(f) => {
                inlined.entry(f.name().to_string()).or_default().insert(key.clone(), value.clone());
            }
            None => return Err(err(&here, format!("is not a field of {} that Convoy knows", desc.name()))),
        }
    }
    for (name, object) in inlined {
        let field = desc.get_field_by_name(&name).expect("found among the fields above");
        let inner = field.kind().as_message().cloned().expect("inline fields are messages");
        msg.set_field(&field, Value::Message(json_to_message(&Json::Object(object), &inner, path)?));
    }
    Ok(msg)
}

/// Whether a JSON key belongs to message `m` (directly or through its own inlined fields).
fn accepts(m: &MessageDescriptor, key: &str) -> bool {
    m.get_field_by_name(key).is_some_and(|f| !is_inline(m, &f))
        || m.fields().any(|f| is_inline(m, &f) && f.kind().as_message().is_some_and(|inner| accepts(inner, key)))
}

fn json_to_value(json: &Json, field: &FieldDescriptor, path: &str) -> Result<Value, PodSpecError> {
    if field.is_map() {
        let Json::Object(object) = json else { return Err(err(path, "must be an object")) };
        let entry = field.kind().as_message().cloned().expect("map fields have an entry message");
        let value_field = entry.map_entry_value_field();
        let mut map = HashMap::new();
        for (k, v) in object {
            map.insert(MapKey::String(k.clone()), single(v, &value_field, &join(path, k))?);
        }
        return Ok(Value::Map(map));
    }
    if field.is_list() {
        let Json::Array(items) = json else { return Err(err(path, "must be an array")) };
        return Ok(Value::List(
            items
                .iter()
                .enumerate()
                .map(|(i, v)| single(v, field, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()?,
        ));
    }
    single(json, field, path)
}

fn single(json: &Json, field: &FieldDescriptor, path: &str) -> Result<Value, PodSpecError> {
    let int = || json.as_i64().ok_or_else(|| err(path, "must be an integer"));
    Ok(match field.kind() {
        Kind::String => Value::String(json.as_str().ok_or_else(|| err(path, "must be a string"))?.to_string()),
        Kind::Bool => Value::Bool(json.as_bool().ok_or_else(|| err(path, "must be true or false"))?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            Value::I32(i32::try_from(int()?).map_err(|_| err(path, "out of the 32-bit range"))?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => Value::I64(int()?),
        Kind::Double => Value::F64(json.as_f64().ok_or_else(|| err(path, "must be a number"))?),
        Kind::Message(m) => Value::Message(json_to_message(json, &m, path)?),
        _ => return Err(err(path, "a kind of value pod specs do not have")),
    })
}

mod json_text;
pub use json_text::to_json_text;

#[cfg(test)]
mod tests;
