use super::*;
use prost::Message;
use serde_json::json;

/// A JSON pod spec with every field of every message reachable from PodSpec set (values derived
/// from the field's name and kind), as Kubernetes writes it.
fn full(desc: &MessageDescriptor, depth: usize) -> Json {
    match desc.full_name() {
        QUANTITY => return json!("1500m"),
        INT_OR_STRING => return if depth.is_multiple_of(2) { json!(8080) } else { json!("http") },
        TIME => return json!("2024-05-06T07:08:09Z"),
        FIELDS_V1 => return json!({"f:metadata": {"f:labels": {}}}),
        _ => {}
    }
    let mut out = Map::new();
    for field in desc.fields() {
        let value = |f: &FieldDescriptor| scalar_or_message(f, depth);
        let v = if field.is_map() {
            let entry = field.kind().as_message().cloned().unwrap();
            json!({ "key-a": value(&entry.map_entry_value_field()) })
        } else if field.is_list() {
            Json::Array(vec![value(&field)])
        } else {
            value(&field)
        };
        if is_inline(desc, &field) {
            if let Json::Object(inner) = v {
                out.extend(inner);
            }
        } else {
            out.insert(field.name().to_string(), v);
        }
    }
    Json::Object(out)
}

fn scalar_or_message(f: &FieldDescriptor, depth: usize) -> Json {
    match f.kind() {
        Kind::String => json!(format!("{}-value", f.name())),
        Kind::Bool => json!(true),
        Kind::Int32 => json!(7),
        Kind::Int64 => json!(9_000_000_000_i64),
        Kind::Double => json!(0.5),
        Kind::Message(m) => {
            assert!(depth < 12, "{} nests too deep", m.full_name());
            full(&m, depth + 1)
        }
        k => panic!("{}: unexpected kind {k:?}", f.full_name()),
    }
}

#[test]
fn every_pod_spec_field_round_trips_between_kubernetes_json_and_protobuf() {
    let desc = pod_spec_descriptor();
    let spec = full(&desc, 0);
    let encoded = from_json(&spec).unwrap();
    assert!(encoded.0.len() > 5_000, "every field is encoded: {} bytes", encoded.0.len());
    assert_eq!(to_json(&encoded).unwrap(), spec);
    // Decoded again through the generated message wrapper (a field at a time) it is the same.
    let through = EncodedPodSpec::decode(encoded.encode_to_vec().as_slice()).unwrap();
    assert_eq!(through, encoded);
}

#[test]
fn the_field_names_are_those_of_kubernetes_json() {
    // k8s-openapi (Convoy's Kubernetes types) reads the JSON without losing anything: every
    // name is one Kubernetes knows, in its place.
    let spec = full(&pod_spec_descriptor(), 0);
    let typed: k8s_openapi::api::core::v1::PodSpec = serde_json::from_value(spec.clone()).unwrap();
    let back = serde_json::to_value(&typed).unwrap();
    let mut missing = Vec::new();
    diff(&spec, &back, "", &mut missing);
    assert_eq!(missing, Vec::<String>::new());
}

/// Paths present in `a` and absent or different in `b`.
fn diff(a: &Json, b: &Json, path: &str, out: &mut Vec<String>) {
    match (a, b) {
        (Json::Object(x), Json::Object(y)) => {
            for (k, v) in x {
                match y.get(k) {
                    Some(w) => diff(v, w, &join(path, k), out),
                    None => out.push(join(path, k)),
                }
            }
        }
        (Json::Array(x), Json::Array(y)) if x.len() == y.len() => {
            for (i, (v, w)) in x.iter().zip(y).enumerate() {
                diff(v, w, &format!("{path}[{i}]"), out);
            }
        }
        _ if a == b => {}
        _ => out.push(format!("{path}: {a} != {b}")),
    }
}

#[test]
fn a_typical_job_converts_exactly() {
    let spec = json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "main",
            "image": "busybox:1.36",
            "command": ["sh", "-c"],
            "args": ["echo hello"],
            "env": [{"name": "A", "value": "1"}, {"name": "S", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k"}}}],
            "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
            "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 5},
        }],
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": "2Gi"}}],
    });
    let encoded = from_json(&spec).unwrap();
    assert_eq!(to_json(&encoded).unwrap(), spec);
}

#[test]
fn unknown_fields_are_refused_with_their_place() {
    // containers[0] with field number 99 (varint 1), which no Container has.
    let mut container = Vec::new();
    encode_key(1, WireType::LengthDelimited, &mut container);
    encode_varint(1, &mut container);
    container.push(b'a');
    encode_key(99, WireType::Varint, &mut container);
    encode_varint(1, &mut container);
    let mut spec = Vec::new();
    encode_key(2, WireType::LengthDelimited, &mut spec);
    encode_varint(container.len() as u64, &mut spec);
    spec.extend(container);
    let e = to_json(&EncodedPodSpec(spec)).unwrap_err();
    assert_eq!(e.field, "containers[0]");
    assert!(e.message.contains("field number 99"), "{e}");

    let e = from_json(&json!({"containers": [{"name": "a", "colour": "blue"}]})).unwrap_err();
    assert_eq!(e.field, "containers[0].colour");
    let e = from_json(&json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": true}}}]})).unwrap_err();
    assert_eq!(e.field, "containers[0].resources.requests.cpu");
}

#[test]
fn a_truncated_encoding_is_an_error_not_a_panic() {
    let full = from_json(&json!({"containers": [{"name": "main", "image": "busybox"}]})).unwrap().0;
    for cut in 1..full.len() {
        let mut wrapped = Vec::new();
        encode_key(7, WireType::LengthDelimited, &mut wrapped);
        encode_varint(full.len() as u64, &mut wrapped);
        wrapped.extend_from_slice(&full[..cut]);
        // Either the wrapper or the pod spec itself refuses; neither panics.
        let decoded = EncodedPodSpec::decode(&wrapped[2..]);
        if let Ok(spec) = decoded {
            let _ = to_json(&spec);
        }
    }
}
