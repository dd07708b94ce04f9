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
    assert_eq!(text_json(&encoded.0), spec);
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
    assert_eq!(text_json(&encoded.0), spec);
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
    let e = to_json(&EncodedPodSpec(spec.clone())).unwrap_err();
    assert_eq!(e.field, "containers[0]");
    assert!(e.message.contains("field number 99"), "{e}");
    assert_eq!(to_json_text(&spec).unwrap_err(), e);

    let e = from_json(&json!({"containers": [{"name": "a", "colour": "blue"}]})).unwrap_err();
    assert_eq!(e.field, "containers[0].colour");
    let e = from_json(&json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": true}}}]})).unwrap_err();
    assert_eq!(e.field, "containers[0].resources.requests.cpu");
}

#[test]
fn a_truncated_encoding_is_refused_as_not_a_pod_spec() {
    let full = from_json(&json!({"containers": [{"name": "main", "image": "busybox"}]})).unwrap().0;
    // The spec is one field (its containers) from the first byte to the last: every prefix cuts
    // it short.
    for cut in 1..full.len() {
        let part = &full[..cut];
        let refused = |e: PodSpecError| e.field.is_empty() && e.message.starts_with("is not a valid protobuf PodSpec");
        assert!(to_json_text(part).is_err_and(refused), "cut at {cut}: {:?}", to_json_text(part));
        let spec = EncodedPodSpec(part.to_vec());
        assert!(to_json(&spec).is_err_and(refused), "cut at {cut}: {:?}", to_json(&spec));
        assert!(EncodedPodSpec::decode(part).is_err(), "cut at {cut}");
        // Inside a message that declares it whole (field 7, the spec's full length), the
        // message itself is refused.
        let mut wrapped = Vec::new();
        encode_key(7, WireType::LengthDelimited, &mut wrapped);
        encode_varint(full.len() as u64, &mut wrapped);
        wrapped.extend_from_slice(part);
        assert!(EncodedPodSpec::decode(wrapped.as_slice()).is_err(), "cut at {cut}");
    }
}

/// The JSON value of [`to_json_text`]'s text (which must parse).
fn text_json(bytes: &[u8]) -> Json {
    let text = to_json_text(bytes).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The top-level fields of an encoding, each as its own bytes (key and value).
fn split_fields(mut bytes: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let start = bytes;
        let key = decode_varint(&mut bytes).unwrap();
        match key & 7 {
            0 => {
                decode_varint(&mut bytes).unwrap();
            }
            1 => bytes = &bytes[8..],
            2 => {
                let len = decode_varint(&mut bytes).unwrap() as usize;
                bytes = &bytes[len..];
            }
            5 => bytes = &bytes[4..],
            _ => panic!("group"),
        }
        out.push(((key >> 3) as u32, start[..start.len() - bytes.len()].to_vec()));
    }
    out
}

#[test]
fn fields_in_any_wire_order_and_repeated_items_interleaved_give_the_same_json() {
    let spec = full(&pod_spec_descriptor(), 0);
    // A second container and toleration, so repeated fields have several items to interleave.
    let mut more = spec.clone();
    more["containers"].as_array_mut().unwrap().push(json!({"name": "second", "image": "b"}));
    more["tolerations"].as_array_mut().unwrap().push(json!({"key": "k2"}));
    more["nodeSelector"]["key-b"] = json!("b");
    let encoded = from_json(&more).unwrap().0;
    let expected = to_json(&EncodedPodSpec(encoded.clone())).unwrap();
    assert_eq!(expected, more);
    let fields = split_fields(&encoded);
    // Fields by number in reverse, then round-robin across numbers (items of one field keep
    // their order: that order is the list's).
    let mut by_number: std::collections::BTreeMap<u32, std::collections::VecDeque<Vec<u8>>> = Default::default();
    for (n, b) in &fields {
        by_number.entry(*n).or_default().push_back(b.clone());
    }
    let reversed: Vec<u8> = by_number.values().rev().flat_map(|q| q.iter().flatten().copied()).collect();
    let mut interleaved = Vec::new();
    while by_number.values().any(|q| !q.is_empty()) {
        for q in by_number.values_mut().rev() {
            if let Some(b) = q.pop_front() {
                interleaved.extend(b);
            }
        }
    }
    for (name, bytes) in [("reversed", reversed), ("interleaved", interleaved)] {
        let old = to_json(&EncodedPodSpec(bytes.clone())).unwrap();
        let new = text_json(&bytes);
        // Repeated items of one field keep their order in both.
        assert_eq!(new["containers"][1]["name"], json!("second"), "{name}");
        assert_eq!(new, old, "{name}");
        assert_eq!(new, more, "{name}");
    }
}

#[test]
fn protobuf_merge_rules_hold_for_repeated_scalars_messages_and_map_keys() {
    let mut spec = Vec::new();
    // restartPolicy (a string) twice: the last wins.
    let policy = pod_spec_descriptor().get_field_by_name("restartPolicy").unwrap().number();
    for p in ["Always", "Never"] {
        encode_key(policy, WireType::LengthDelimited, &mut spec);
        encode_varint(p.len() as u64, &mut spec);
        spec.extend_from_slice(p.as_bytes());
    }
    // securityContext (a message) in two parts: merged.
    let sc = from_json(&json!({"securityContext": {"runAsUser": 7}})).unwrap().0;
    let sc2 = from_json(&json!({"securityContext": {"runAsGroup": 8, "supplementalGroups": [1, 2]}})).unwrap().0;
    spec.extend(&sc);
    spec.extend(&sc2);
    // nodeSelector with one key twice: the last entry wins.
    spec.extend(from_json(&json!({"nodeSelector": {"zone": "a"}})).unwrap().0);
    spec.extend(from_json(&json!({"nodeSelector": {"zone": "b", "disk": "ssd"}})).unwrap().0);
    let expected = json!({
        "restartPolicy": "Never",
        "securityContext": {"runAsUser": 7, "runAsGroup": 8, "supplementalGroups": [1, 2]},
        "nodeSelector": {"zone": "b", "disk": "ssd"},
    });
    assert_eq!(to_json(&EncodedPodSpec(spec.clone())).unwrap(), expected);
    assert_eq!(text_json(&spec), expected);

    // supplementalGroups packed (one length-delimited run of varints) reads as the same list.
    let psc = pod_spec_descriptor().get_field_by_name("securityContext").unwrap();
    let groups = psc.kind().as_message().unwrap().get_field_by_name("supplementalGroups").unwrap().number();
    let mut packed_values = Vec::new();
    for g in [1u64, 2, 300] {
        encode_varint(g, &mut packed_values);
    }
    let mut inner = Vec::new();
    encode_key(groups, WireType::LengthDelimited, &mut inner);
    encode_varint(packed_values.len() as u64, &mut inner);
    inner.extend(packed_values);
    let mut packed = Vec::new();
    encode_key(psc.number(), WireType::LengthDelimited, &mut packed);
    encode_varint(inner.len() as u64, &mut packed);
    packed.extend(inner);
    let expected = json!({"securityContext": {"supplementalGroups": [1, 2, 300]}});
    assert_eq!(to_json(&EncodedPodSpec(packed.clone())).unwrap(), expected);
    assert_eq!(text_json(&packed), expected);
}

#[test]
fn text_that_needs_escaping_is_escaped_and_bad_utf8_is_named() {
    let spec = json!({"containers": [{"name": "m", "command": ["sh", "-c", "echo \"<a>\"\n\t\u{1}é"]}]});
    let encoded = from_json(&spec).unwrap().0;
    assert_eq!(text_json(&encoded), spec);
    // The same with the command's bytes made invalid UTF-8.
    let needle = "echo".as_bytes();
    let at = encoded.windows(needle.len()).position(|w| w == needle).unwrap();
    let mut bad = encoded.clone();
    bad[at] = 0xff;
    let e = to_json_text(&bad).unwrap_err();
    assert_eq!(e.field, "containers[0].command[2]");
    assert!(e.message.contains("UTF-8"), "{e}");
}
