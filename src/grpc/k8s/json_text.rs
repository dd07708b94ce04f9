//! A protobuf pod spec straight to Kubernetes JSON text, in one pass over its wire bytes.
//!
//! [`super::to_json`] decodes into prost-reflect's dynamic messages and builds a
//! `serde_json::Value` tree, which the submission path then writes out as text and parses again:
//! on Armada's SubmitJobs that made a job cost half again as much server CPU as the same job
//! through REST. Here each message's fields are looked up in tables built once from the same
//! descriptors (JSON names, kinds, inlined fields, the messages Kubernetes writes as strings), the
//! values are written as they are read, and a field's path is only spelled out when there is an
//! error to name. The result is the same JSON as [`super::to_json`]'s (the tests hold the two
//! against each other), but for the order of object keys.

use super::{FIELDS_V1, INT_OR_STRING, PodSpecError, QUANTITY, TIME, err, is_inline, join, pod_spec_descriptor};
use prost::encoding::decode_varint;
use prost_reflect::{Kind, MessageDescriptor};
use std::collections::HashMap;
use std::sync::LazyLock;

/// What a field holds, as far as writing its JSON goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ValueKind {
    Bool,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Sint32,
    Sint64,
    Fixed32,
    Fixed64,
    Sfixed32,
    Sfixed64,
    Float,
    Double,
    String,
    /// A message: its index in [`Tables::messages`].
    Message(usize),
    /// Bytes and enums: pod specs have none (outside FieldsV1, handled as a whole).
    Unsupported,
}

/// Messages whose Kubernetes JSON is not an object of their fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Special {
    None,
    Quantity,
    IntOrString,
    Time,
    FieldsV1,
}

#[derive(Debug)]
struct FieldInfo {
    number: u32,
    name: String,
    /// Place among the message's fields as declared: output follows it, and items of a
    /// repeated field stay in their order on the wire.
    order: usize,
    kind: ValueKind,
    list: bool,
    /// A map (string keys): the kind of its values.
    map_value: Option<ValueKind>,
    /// Written into the parent object (Go's embedded structs).
    inline: bool,
}

#[derive(Debug)]
struct MessageInfo {
    full_name: String,
    special: Special,
    /// Sorted by number.
    fields: Vec<FieldInfo>,
}

impl MessageInfo {
    fn field(&self, number: u32) -> Option<usize> {
        self.fields.binary_search_by_key(&number, |f| f.number).ok()
    }
}

struct Tables {
    messages: Vec<MessageInfo>,
}

/// The tables of every message reachable from PodSpec (PodSpec first).
static TABLES: LazyLock<Tables> = LazyLock::new(|| {
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut queue: Vec<MessageDescriptor> = vec![pod_spec_descriptor()];
    index.insert(queue[0].full_name().to_string(), 0);
    let mut messages = Vec::new();
    let mut next = 0;
    while next < queue.len() {
        let desc = queue[next].clone();
        next += 1;
        let mut kind_of = |kind: Kind| match kind {
            Kind::Bool => ValueKind::Bool,
            Kind::Int32 => ValueKind::Int32,
            Kind::Int64 => ValueKind::Int64,
            Kind::Uint32 => ValueKind::Uint32,
            Kind::Uint64 => ValueKind::Uint64,
            Kind::Sint32 => ValueKind::Sint32,
            Kind::Sint64 => ValueKind::Sint64,
            Kind::Fixed32 => ValueKind::Fixed32,
            Kind::Fixed64 => ValueKind::Fixed64,
            Kind::Sfixed32 => ValueKind::Sfixed32,
            Kind::Sfixed64 => ValueKind::Sfixed64,
            Kind::Float => ValueKind::Float,
            Kind::Double => ValueKind::Double,
            Kind::String => ValueKind::String,
            Kind::Bytes | Kind::Enum(_) => ValueKind::Unsupported,
            Kind::Message(m) => {
                let n = index.len();
                let at = *index.entry(m.full_name().to_string()).or_insert_with(|| {
                    queue.push(m.clone());
                    n
                });
                ValueKind::Message(at)
            }
        };
        let mut fields: Vec<FieldInfo> = desc
            .fields()
            .enumerate()
            .map(|(order, f)| {
                let map_value = if f.is_map() {
                    f.kind().as_message().map(|entry| kind_of(entry.map_entry_value_field().kind()))
                } else {
                    None
                };
                FieldInfo {
                    number: f.number(),
                    name: f.name().to_string(),
                    order,
                    kind: if map_value.is_some() { ValueKind::Unsupported } else { kind_of(f.kind()) },
                    list: f.is_list(),
                    map_value,
                    inline: is_inline(&desc, &f),
                }
            })
            .collect();
        fields.sort_by_key(|f| f.number);
        let special = match desc.full_name() {
            QUANTITY => Special::Quantity,
            INT_OR_STRING => Special::IntOrString,
            TIME => Special::Time,
            FIELDS_V1 => Special::FieldsV1,
            _ => Special::None,
        };
        messages.push(MessageInfo { full_name: desc.full_name().to_string(), special, fields });
    }
    Tables { messages }
});

/// Where a value is below the pod spec, spelled out only for an error.
#[derive(Clone, Copy)]
enum Seg<'a> {
    Root,
    Field(&'a str),
    Index(usize),
    Key(&'a str),
}

#[derive(Clone, Copy)]
struct Path<'a> {
    parent: Option<&'a Path<'a>>,
    seg: Seg<'a>,
    depth: u32,
}

/// As deep as prost lets a message nest: a hostile encoding cannot exhaust the stack.
const MAX_DEPTH: u32 = 100;

impl<'a> Path<'a> {
    const ROOT: Path<'static> = Path { parent: None, seg: Seg::Root, depth: 0 };

    fn child(&'a self, seg: Seg<'a>) -> Path<'a> {
        Path { parent: Some(self), seg, depth: self.depth + 1 }
    }

    fn render(&self) -> String {
        let above = self.parent.map(Path::render).unwrap_or_default();
        match self.seg {
            Seg::Root => above,
            Seg::Field(name) | Seg::Key(name) => join(&above, name),
            Seg::Index(i) => format!("{above}[{i}]"),
        }
    }
}

fn malformed(detail: &str) -> PodSpecError {
    err("", format!("is not a valid protobuf PodSpec: {detail}"))
}

/// One field as it was on the wire.
#[derive(Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Fixed32(u32),
    Bytes(&'a [u8]),
}

/// The next (number, value) of an encoded message, advancing `buf`.
fn next_field<'a>(buf: &mut &'a [u8]) -> Result<Option<(u32, Wire<'a>)>, PodSpecError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let key = decode_varint(buf).map_err(|e| malformed(&e.to_string()))?;
    let number = u32::try_from(key >> 3).map_err(|_| malformed("field number out of range"))?;
    if number == 0 {
        return Err(malformed("field number 0"));
    }
    let take = |buf: &mut &'a [u8], n: usize| -> Result<&'a [u8], PodSpecError> {
        if buf.len() < n {
            return Err(malformed("a field runs past the end of its message"));
        }
        let (head, rest) = buf.split_at(n);
        *buf = rest;
        Ok(head)
    };
    let value = match key & 7 {
        0 => Wire::Varint(decode_varint(buf).map_err(|e| malformed(&e.to_string()))?),
        1 => Wire::Fixed64(u64::from_le_bytes(take(buf, 8)?.try_into().map_err(|_| malformed("fixed64"))?)),
        2 => {
            let len = decode_varint(buf).map_err(|e| malformed(&e.to_string()))?;
            let len = usize::try_from(len).map_err(|_| malformed("length out of range"))?;
            Wire::Bytes(take(buf, len)?)
        }
        5 => Wire::Fixed32(u32::from_le_bytes(take(buf, 4)?.try_into().map_err(|_| malformed("fixed32"))?)),
        _ => return Err(malformed("pod specs have no groups")),
    };
    Ok(Some((number, value)))
}

/// The Kubernetes JSON text of an encoded pod spec.
pub fn to_json_text(spec: &[u8]) -> Result<String, PodSpecError> {
    let mut out = Vec::with_capacity(spec.len() * 2);
    write_message(spec, 0, &mut out, &Path::ROOT)?;
    // Every byte written came from a str, an escaped str or ASCII.
    String::from_utf8(out).map_err(|_| err("", "the pod spec's JSON is not UTF-8"))
}

/// Writes message `msg` (encoded in `bytes`) as its JSON value.
fn write_message(bytes: &[u8], msg: usize, out: &mut Vec<u8>, path: &Path) -> Result<(), PodSpecError> {
    if path.depth > MAX_DEPTH {
        return Err(malformed(&format!("messages nest deeper than {MAX_DEPTH} levels")));
    }
    let info = &TABLES.messages[msg];
    match info.special {
        Special::None => {
            out.push(b'{');
            let mut first = true;
            write_fields(bytes, msg, out, path, &mut first)?;
            out.push(b'}');
            Ok(())
        }
        special => write_special(bytes, info, special, out, path),
    }
}

/// Quantity, IntOrString and Time as the strings and numbers Kubernetes writes; FieldsV1 as the
/// JSON it holds.
fn write_special(
    bytes: &[u8],
    info: &MessageInfo,
    special: Special,
    out: &mut Vec<u8>,
    path: &Path,
) -> Result<(), PodSpecError> {
    // The last value of each field wins, as protobuf merges.
    let mut values: [Option<Wire>; 4] = [None; 4];
    let mut buf = bytes;
    while let Some((number, value)) = next_field(&mut buf)? {
        if info.field(number).is_none() {
            return Err(unknown_field(number, info, path));
        }
        if let Some(slot) = values.get_mut(number as usize) {
            *slot = Some(value);
        }
    }
    fn text<'b>(w: Option<Wire<'b>>, path: &Path) -> Result<&'b str, PodSpecError> {
        match w {
            None => Ok(""),
            Some(Wire::Bytes(b)) => std::str::from_utf8(b).map_err(|_| err(&path.render(), "is not UTF-8")),
            Some(_) => Err(wrong_wire(path)),
        }
    }
    let varint = |w: Option<Wire>| -> Result<u64, PodSpecError> {
        match w {
            None => Ok(0),
            Some(Wire::Varint(v)) => Ok(v),
            Some(_) => Err(wrong_wire(path)),
        }
    };
    match special {
        Special::Quantity => write_str(out, text(values[1], path)?),
        Special::IntOrString => {
            if varint(values[1])? as i64 == 1 {
                write_str(out, text(values[3], path)?);
            } else {
                write_display(out, varint(values[2])? as i64 as i32);
            }
        }
        Special::Time => {
            let seconds = varint(values[1])? as i64;
            let t = u64::try_from(seconds).map_err(|_| err(&path.render(), "times before 1970 are not supported"))?;
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t);
            write_str(out, &humantime::format_rfc3339_seconds(at).to_string());
        }
        Special::FieldsV1 => {
            let raw = match values[1] {
                None => &[][..],
                Some(Wire::Bytes(b)) => b,
                Some(_) => return Err(wrong_wire(path)),
            };
            let value: &serde_json::value::RawValue =
                serde_json::from_slice(raw).map_err(|e| err(&path.render(), format!("raw is not JSON: {e}")))?;
            out.extend_from_slice(value.get().as_bytes());
        }
        Special::None => {}
    }
    Ok(())
}

fn unknown_field(number: u32, info: &MessageInfo, path: &Path) -> PodSpecError {
    err(
        &path.render(),
        format!("has field number {number} that Convoy does not know in {} (see docs/armada-grpc.md)", info.full_name),
    )
}

fn wrong_wire(path: &Path) -> PodSpecError {
    malformed(&format!("{} has the wrong wire type for its field", path.render()))
}

/// Writes the fields of message `msg` into the object being written (`first`: nothing written
/// in it yet). Inlined messages write theirs into the same object.
fn write_fields(
    bytes: &[u8],
    msg: usize,
    out: &mut Vec<u8>,
    path: &Path,
    first: &mut bool,
) -> Result<(), PodSpecError> {
    let info = &TABLES.messages[msg];
    let mut seen: Vec<(usize, Wire)> = Vec::new();
    let mut buf = bytes;
    while let Some((number, value)) = next_field(&mut buf)? {
        let Some(at) = info.field(number) else { return Err(unknown_field(number, info, path)) };
        seen.push((at, value));
    }
    // Declared order, a repeated field's items in wire order (the sort is stable).
    seen.sort_by_key(|(at, _)| info.fields[*at].order);
    let mut i = 0;
    while i < seen.len() {
        let at = seen[i].0;
        let end = i + seen[i..].iter().take_while(|(a, _)| *a == at).count();
        let field = &info.fields[at];
        let values = &seen[i..end];
        i = end;
        let here = path.child(Seg::Field(&field.name));
        if field.inline {
            let ValueKind::Message(inner) = field.kind else { return Err(wrong_wire(&here)) };
            let merged = merged_bytes(values, &here)?;
            write_fields(&merged, inner, out, &here, first)?;
            continue;
        }
        if !std::mem::take(first) {
            out.push(b',');
        }
        write_str(out, &field.name);
        out.push(b':');
        if let Some(value_kind) = field.map_value {
            write_map(values, value_kind, out, &here)?;
        } else if field.list {
            out.push(b'[');
            let mut n = 0;
            for (_, w) in values {
                match (*w, field.kind) {
                    // Packed scalars: many values in one length-delimited field.
                    (Wire::Bytes(b), kind) if is_packable(kind) => {
                        let mut packed = b;
                        while !packed.is_empty() {
                            let w = match kind {
                                ValueKind::Fixed64 | ValueKind::Sfixed64 | ValueKind::Double => {
                                    let (head, rest) = packed.split_at_checked(8).ok_or_else(|| malformed("packed"))?;
                                    packed = rest;
                                    Wire::Fixed64(u64::from_le_bytes(head.try_into().map_err(|_| malformed("packed"))?))
                                }
                                ValueKind::Fixed32 | ValueKind::Sfixed32 | ValueKind::Float => {
                                    let (head, rest) = packed.split_at_checked(4).ok_or_else(|| malformed("packed"))?;
                                    packed = rest;
                                    Wire::Fixed32(u32::from_le_bytes(head.try_into().map_err(|_| malformed("packed"))?))
                                }
                                _ => Wire::Varint(decode_varint(&mut packed).map_err(|e| malformed(&e.to_string()))?),
                            };
                            if n > 0 {
                                out.push(b',');
                            }
                            write_value(w, field.kind, out, &here.child(Seg::Index(n)))?;
                            n += 1;
                        }
                    }
                    (w, kind) => {
                        if n > 0 {
                            out.push(b',');
                        }
                        write_value(w, kind, out, &here.child(Seg::Index(n)))?;
                        n += 1;
                    }
                }
            }
            out.push(b']');
        } else if let ValueKind::Message(_) = field.kind {
            // A message given more than once is the merge of its parts.
            let merged = merged_bytes(values, &here)?;
            write_value(Wire::Bytes(&merged), field.kind, out, &here)?;
        } else if let Some((_, last)) = values.last() {
            write_value(*last, field.kind, out, &here)?;
        }
    }
    Ok(())
}

fn is_packable(kind: ValueKind) -> bool {
    !matches!(kind, ValueKind::String | ValueKind::Message(_) | ValueKind::Unsupported)
}

/// The bytes of a message field given once, or its parts concatenated (protobuf's merge).
fn merged_bytes<'a>(values: &[(usize, Wire<'a>)], path: &Path) -> Result<std::borrow::Cow<'a, [u8]>, PodSpecError> {
    match values {
        [(_, Wire::Bytes(b))] => Ok(std::borrow::Cow::Borrowed(b)),
        _ => {
            let mut all = Vec::new();
            for (_, w) in values {
                let Wire::Bytes(b) = w else { return Err(wrong_wire(path)) };
                all.extend_from_slice(b);
            }
            Ok(std::borrow::Cow::Owned(all))
        }
    }
}

/// A map's entries (messages of key = 1, value = 2), sorted by key, the last of a key winning.
fn write_map(
    values: &[(usize, Wire)],
    value_kind: ValueKind,
    out: &mut Vec<u8>,
    path: &Path,
) -> Result<(), PodSpecError> {
    let mut entries: Vec<(&str, Option<Wire>)> = Vec::with_capacity(values.len());
    for (_, w) in values {
        let Wire::Bytes(entry) = w else { return Err(wrong_wire(path)) };
        let (mut key, mut value) = ("", None);
        let mut buf = *entry;
        while let Some((number, w)) = next_field(&mut buf)? {
            match (number, w) {
                (1, Wire::Bytes(k)) => {
                    key = std::str::from_utf8(k).map_err(|_| err(&path.render(), "a key is not UTF-8"))?;
                }
                (1, _) => return Err(err(&path.render(), "Kubernetes maps have string keys")),
                (2, w) => value = Some(w),
                (n, _) => return Err(malformed(&format!("{} has a map entry with field number {n}", path.render()))),
            }
        }
        entries.push((key, value));
    }
    // Stable: of equal keys the last stays last, and is kept.
    entries.sort_by(|a, b| a.0.cmp(b.0));
    out.push(b'{');
    let mut first = true;
    for (n, (key, value)) in entries.iter().enumerate() {
        if entries.get(n + 1).is_some_and(|next| next.0 == *key) {
            continue;
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        write_str(out, key);
        out.push(b':');
        let here = path.child(Seg::Key(key));
        match value {
            Some(w) => write_value(*w, value_kind, out, &here)?,
            // An entry without a value holds the value type's default.
            None => write_default(value_kind, out, &here)?,
        }
    }
    out.push(b'}');
    Ok(())
}

fn write_default(kind: ValueKind, out: &mut Vec<u8>, path: &Path) -> Result<(), PodSpecError> {
    match kind {
        ValueKind::String => write_str(out, ""),
        ValueKind::Message(m) => write_message(&[], m, out, path)?,
        ValueKind::Bool => out.extend_from_slice(b"false"),
        ValueKind::Unsupported => return Err(err(&path.render(), "a kind of value pod specs do not have")),
        _ => out.push(b'0'),
    }
    Ok(())
}

/// One value of a field of kind `kind`.
fn write_value(w: Wire, kind: ValueKind, out: &mut Vec<u8>, path: &Path) -> Result<(), PodSpecError> {
    match (kind, w) {
        (ValueKind::Bool, Wire::Varint(v)) => out.extend_from_slice(if v != 0 { b"true" } else { b"false" }),
        (ValueKind::Int32, Wire::Varint(v)) => write_display(out, v as i64 as i32),
        (ValueKind::Int64, Wire::Varint(v)) => write_display(out, v as i64),
        (ValueKind::Uint32, Wire::Varint(v)) => write_display(out, v as u32),
        (ValueKind::Uint64, Wire::Varint(v)) => write_display(out, v),
        (ValueKind::Sint32, Wire::Varint(v)) => write_display(out, ((v >> 1) as i64 ^ -((v & 1) as i64)) as i32),
        (ValueKind::Sint64, Wire::Varint(v)) => write_display(out, (v >> 1) as i64 ^ -((v & 1) as i64)),
        (ValueKind::Fixed32, Wire::Fixed32(v)) => write_display(out, v),
        (ValueKind::Sfixed32, Wire::Fixed32(v)) => write_display(out, v as i32),
        (ValueKind::Fixed64, Wire::Fixed64(v)) => write_display(out, v),
        (ValueKind::Sfixed64, Wire::Fixed64(v)) => write_display(out, v as i64),
        (ValueKind::Float, Wire::Fixed32(v)) => write_float(out, f64::from(f32::from_bits(v))),
        (ValueKind::Double, Wire::Fixed64(v)) => write_float(out, f64::from_bits(v)),
        (ValueKind::String, Wire::Bytes(b)) => {
            write_str(out, std::str::from_utf8(b).map_err(|_| err(&path.render(), "is not UTF-8"))?);
        }
        (ValueKind::Message(m), Wire::Bytes(b)) => write_message(b, m, out, path)?,
        (ValueKind::Unsupported, _) => return Err(err(&path.render(), "a kind of value pod specs do not have")),
        _ => return Err(wrong_wire(path)),
    }
    Ok(())
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    // Writing into a Vec cannot fail; serde_json escapes as JSON requires.
    let _ = serde_json::to_writer(&mut *out, s);
}

fn write_display(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// As serde_json writes an f64 (a number that is not finite has no JSON: null).
fn write_float(out: &mut Vec<u8>, f: f64) {
    let _ = serde_json::to_writer(&mut *out, &serde_json::Value::from(f));
}
