//! `Resources`: named fixed-point quantities (cpu in millicores, memory in bytes, other resources in
//! milli-units) with exact arithmetic.

use super::names::ResourceName;
use super::quantity::{QuantityError, Unit, format_quantity, parse_quantity};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// A set of named resource amounts. Absent names are zero. Serialized as Kubernetes quantity
/// strings in JSON/YAML (`{"cpu": "1500m", "memory": "4Gi"}`) and as integers in binary encodings.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources(BTreeMap<ResourceName, i64>);

/// A quantity for a named resource was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("resource {resource}: {error}")]
pub struct ResourceError {
    /// The resource name as given.
    pub resource: String,
    /// What is wrong with its quantity (or with the name itself, as `Malformed`).
    pub error: QuantityError,
}

impl Resources {
    /// No resources.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses `name -> quantity string` pairs.
    pub fn parse<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Self, ResourceError> {
        let mut out = Self::new();
        for (name, q) in pairs {
            let rn = ResourceName::new(name).map_err(|e| ResourceError {
                resource: name.to_string(),
                error: QuantityError::Malformed(e.to_string()),
            })?;
            let v = parse_quantity(q, Unit::for_resource(name))
                .map_err(|error| ResourceError { resource: name.to_string(), error })?;
            out.set(rn, v);
        }
        Ok(out)
    }

    /// The stored amount of `name` (0 if absent).
    pub fn get(&self, name: &str) -> i64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Sets the amount of `name`; zero removes the entry.
    pub fn set(&mut self, name: ResourceName, value: i64) {
        if value == 0 {
            self.0.remove(&name);
        } else {
            self.0.insert(name, value);
        }
    }

    /// Iterates over non-zero entries in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&ResourceName, i64)> {
        self.0.iter().map(|(k, v)| (k, *v))
    }

    /// The non-zero amounts by name.
    pub fn into_map(self) -> BTreeMap<ResourceName, i64> {
        self.0
    }

    /// Amounts by name (zero amounts are dropped), taking the map as it is.
    pub fn from_map(mut map: BTreeMap<ResourceName, i64>) -> Self {
        map.retain(|_, v| *v != 0);
        Self(map)
    }

    /// Names with a non-zero amount.
    pub fn names(&self) -> impl Iterator<Item = &ResourceName> {
        self.0.keys()
    }

    /// True if every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.0.is_empty()
    }

    /// `self += other`, saturating.
    pub fn add(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            let cur = self.get(k.as_str());
            self.set(k.clone(), cur.saturating_add(*v));
        }
    }

    /// `self -= other`, saturating (may go negative).
    pub fn sub(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            let cur = self.get(k.as_str());
            self.set(k.clone(), cur.saturating_sub(*v));
        }
    }

    /// Entry-wise maximum.
    pub fn max_with(&mut self, other: &Resources) {
        for (k, v) in &other.0 {
            if *v > self.get(k.as_str()) {
                self.set(k.clone(), *v);
            }
        }
    }

    /// True if `self` fits in `avail` for every resource.
    pub fn fits_in(&self, avail: &Resources) -> bool {
        self.0.iter().all(|(k, v)| *v <= avail.get(k.as_str()))
    }

    /// Dominant share `max_r(self_r / total_r)` over the listed resources; resources with a zero
    /// total are ignored.
    pub fn dominant_share(&self, total: &Resources, over: &[ResourceName]) -> f64 {
        over.iter()
            .filter_map(|r| {
                let t = total.get(r.as_str());
                (t > 0).then(|| self.get(r.as_str()) as f64 / t as f64)
            })
            .fold(0.0, f64::max)
    }

    /// The amount of `name` as a Kubernetes quantity string.
    pub fn quantity_string(&self, name: &str) -> String {
        format_quantity(self.get(name), Unit::for_resource(name))
    }
}

impl fmt::Debug for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}: {}", format_quantity(*v, Unit::for_resource(k.as_str())))?;
        }
        f.write_str("}")
    }
}

impl FromIterator<(ResourceName, i64)> for Resources {
    fn from_iter<T: IntoIterator<Item = (ResourceName, i64)>>(iter: T) -> Self {
        let mut r = Resources::new();
        for (k, v) in iter {
            let cur = r.get(k.as_str());
            r.set(k, cur + v);
        }
        r
    }
}

impl Serialize for Resources {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, &QuantityOut(k, *v))?;
        }
        m.end()
    }
}

/// Serializes one amount as a quantity string for human-readable formats, an integer otherwise.
struct QuantityOut<'a>(&'a ResourceName, i64);

impl Serialize for QuantityOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&format_quantity(self.1, Unit::for_resource(self.0.as_str())))
        } else {
            s.serialize_i64(self.1)
        }
    }
}

impl<'de> Deserialize<'de> for Resources {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        if d.is_human_readable() {
            #[derive(Deserialize)]
            #[serde(untagged)]
            enum Q {
                Int(i64),
                Float(f64),
                Str(String),
            }
            let raw = BTreeMap::<String, Q>::deserialize(d)?;
            let mut out = Resources::new();
            for (name, q) in raw {
                let rn = ResourceName::new(&name).map_err(serde::de::Error::custom)?;
                let text = match q {
                    Q::Int(i) => i.to_string(),
                    Q::Float(f) => f.to_string(),
                    Q::Str(s) => s,
                };
                let v = parse_quantity(&text, Unit::for_resource(&name))
                    .map_err(|error| serde::de::Error::custom(ResourceError { resource: name.clone(), error }))?;
                out.set(rn, v);
            }
            Ok(out)
        } else {
            Ok(Resources(BTreeMap::<ResourceName, i64>::deserialize(d)?))
        }
    }
}

/// An object of Kubernetes quantity strings keyed by resource name, as in JSON
/// (`{"cpu": "1500m", "memory": "4Gi"}`). Requests may also give plain numbers.
impl utoipa::PartialSchema for Resources {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{ObjectBuilder, Type};
        let quantity = ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some("A Kubernetes quantity: cpu and devices in units or milli-units (`2`, `500m`), memory and storage in bytes with an optional suffix (`4Gi`, `512M`)."))
            .examples(["1500m", "4Gi"]);
        let name = match <ResourceName as utoipa::PartialSchema>::schema() {
            utoipa::openapi::RefOr::T(s) => Some(s),
            utoipa::openapi::RefOr::Ref(_) => None,
        };
        ObjectBuilder::new()
            .schema_type(Type::Object)
            .description(Some("Amounts per resource name; absent names are zero."))
            .property_names(name)
            .additional_properties(Some(quantity))
            .examples([serde_json::json!({"cpu": "1500m", "memory": "4Gi", "nvidia.com/gpu": "1"})])
            .into()
    }
}

impl utoipa::ToSchema for Resources {}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(pairs: &[(&str, &str)]) -> Resources {
        Resources::parse(pairs.iter().copied()).unwrap()
    }

    #[test]
    fn arithmetic_is_exact() {
        let mut a = Resources::new();
        for _ in 0..10 {
            a.add(&r(&[("cpu", "100m")]));
        }
        assert_eq!(a.get("cpu"), 1000);
        a.sub(&r(&[("cpu", "1")]));
        assert!(a.is_zero());
        assert!(r(&[("cpu", "1"), ("memory", "1Gi")]).fits_in(&r(&[("cpu", "2"), ("memory", "1Gi")])));
        assert!(!r(&[("cpu", "1"), ("nvidia.com/gpu", "1")]).fits_in(&r(&[("cpu", "2")])));
    }

    #[test]
    fn dominant_share_ignores_missing_totals() {
        let total = r(&[("cpu", "9"), ("memory", "18Gi")]);
        let a = r(&[("cpu", "1"), ("memory", "4Gi")]);
        let over = [ResourceName::cpu(), ResourceName::memory(), ResourceName::gpu()];
        assert!((a.dominant_share(&total, &over) - 4.0 / 18.0).abs() < 1e-12);
    }

    #[test]
    fn json_uses_quantity_strings() {
        let a = r(&[("cpu", "1.5"), ("memory", "4Gi")]);
        let s = serde_json::to_string(&a).unwrap();
        assert_eq!(s, r#"{"cpu":"1500m","memory":"4Gi"}"#);
        let back: Resources = serde_json::from_str(r#"{"cpu": 2, "memory": "4Gi"}"#).unwrap();
        assert_eq!(back.get("cpu"), 2000);
        let err = serde_json::from_str::<Resources>(r#"{"cpu": "lots"}"#).unwrap_err();
        assert!(err.to_string().contains("\"lots\""), "{err}");
    }

    #[test]
    fn binary_uses_integers() {
        let a = r(&[("cpu", "1.5"), ("memory", "4Gi")]);
        let bytes = bincode::serde::encode_to_vec(&a, bincode::config::standard()).unwrap();
        let (back, _): (Resources, _) = bincode::serde::decode_from_slice(&bytes, bincode::config::standard()).unwrap();
        assert_eq!(back, a);
    }
}
