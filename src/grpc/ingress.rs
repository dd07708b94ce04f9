//! Armada's ingress and service configs (`JobSubmitRequestItem.ingress` and `.services`) as the
//! Kubernetes Service and Ingress objects a REST submission carries, built the way Armada builds
//! them: one Service per config over the container ports it names, plus an Ingress with one rule
//! (host) per port for each ingress config.
//!
//! The pod's name and namespace are not known at submission (the pod is named after the run), so
//! the objects hold the placeholders the Kubernetes agent fills in when it creates them
//! (`agent::runtime::kubernetes::manifest::PLACEHOLDER_POD` and its siblings).

use super::pb;
use crate::agent::runtime::kubernetes::manifest::{
    PLACEHOLDER_CERT_SUFFIX, PLACEHOLDER_HOST_SUFFIX, PLACEHOLDER_NAMESPACE, PLACEHOLDER_POD,
};
use serde_json::{Map, Value as Json, json};
use std::collections::BTreeMap;
use tonic::Status;

fn invalid(field: impl std::fmt::Display, message: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("{field}: {message}"))
}

/// A container port a Service may expose: Armada exposes the ports of the pod's containers
/// (not init containers) that have no host port, each named `<container>-<port>`.
#[derive(Debug, Clone, PartialEq)]
struct ExposedPort {
    name: String,
    port: u32,
    protocol: Option<String>,
}

fn exposed_ports(pod_spec: &Json) -> Vec<ExposedPort> {
    let mut out = Vec::new();
    for c in pod_spec.get("containers").and_then(Json::as_array).into_iter().flatten() {
        let container = c.get("name").and_then(Json::as_str).unwrap_or_default();
        for p in c.get("ports").and_then(Json::as_array).into_iter().flatten() {
            // The host port is exposed by Kubernetes itself.
            if p.get("hostPort").and_then(Json::as_i64).is_some_and(|h| h > 0) {
                continue;
            }
            let Some(port) = p.get("containerPort").and_then(Json::as_u64).and_then(|n| u32::try_from(n).ok()) else {
                continue;
            };
            out.push(ExposedPort {
                name: format!("{container}-{port}"),
                port,
                protocol: p.get("protocol").and_then(Json::as_str).map(str::to_string),
            });
        }
    }
    out
}

/// The exposed ports a config names, in the pod spec's order; a port no container exposes is
/// INVALID_ARGUMENT naming `<field>.ports[j]` (Armada drops it silently, which hides typos).
fn selected<'a>(field: &str, ports: &[u32], exposed: &'a [ExposedPort]) -> Result<Vec<&'a ExposedPort>, Status> {
    if ports.is_empty() {
        return Err(invalid(format_args!("{field}.ports"), "name at least one container port"));
    }
    for (j, p) in ports.iter().enumerate() {
        let mut by = exposed.iter().filter(|e| e.port == *p);
        match (by.next(), by.next()) {
            (None, _) => {
                return Err(invalid(
                    format_args!("{field}.ports[{j}]"),
                    format!("no container of the pod spec exposes port {p} (without a hostPort)"),
                ));
            }
            // A Service cannot hold one port twice (Armada refuses such pod specs outright).
            (Some(a), Some(b)) => {
                return Err(invalid(
                    format_args!("{field}.ports[{j}]"),
                    format!("port {p} is exposed twice in the pod spec ({} and {})", a.name, b.name),
                ));
            }
            (Some(_), None) => {}
        }
    }
    Ok(exposed.iter().filter(|e| ports.contains(&e.port)).collect())
}

fn service_ports(ports: &[&ExposedPort]) -> Json {
    Json::Array(
        ports
            .iter()
            .map(|p| {
                let mut o = Map::new();
                o.insert("name".into(), json!(p.name));
                o.insert("port".into(), json!(p.port));
                if let Some(proto) = &p.protocol {
                    o.insert("protocol".into(), json!(proto));
                }
                Json::Object(o)
            })
            .collect(),
    )
}

/// A Service over `ports`; `cluster_ip = false` makes it headless. No selector: the agent makes
/// it select the run's pod.
fn service(name: &str, kind: &str, cluster_ip: bool, ports: &[&ExposedPort]) -> Json {
    let mut spec = Map::new();
    spec.insert("type".into(), json!(kind));
    if !cluster_ip {
        spec.insert("clusterIP".into(), json!("None"));
    }
    spec.insert("ports".into(), service_ports(ports));
    json!({"metadata": {"name": name}, "spec": spec})
}

/// The Ingress of one ingress config: a rule per port, host `<port name>-<pod>.<namespace>`
/// and the agent's host suffix, to `service`; TLS over all its hosts when asked.
fn ingress(name: &str, service: &str, config: &pb::IngressConfig, ports: &[&ExposedPort]) -> Json {
    let hosts: Vec<String> = ports
        .iter()
        .map(|p| format!("{}-{PLACEHOLDER_POD}.{PLACEHOLDER_NAMESPACE}{PLACEHOLDER_HOST_SUFFIX}", p.name))
        .collect();
    let rules: Vec<Json> = ports
        .iter()
        .zip(&hosts)
        .map(|(p, host)| {
            json!({"host": host, "http": {"paths": [{
                "path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": service, "port": {"number": p.port}}}
            }]}})
        })
        .collect();
    let mut spec = Map::new();
    spec.insert("rules".into(), Json::Array(rules));
    if config.tls_enabled {
        let secret = if config.cert_name.is_empty() {
            format!("{PLACEHOLDER_NAMESPACE}{PLACEHOLDER_CERT_SUFFIX}")
        } else {
            config.cert_name.clone()
        };
        spec.insert("tls".into(), json!([{"hosts": hosts, "secretName": secret}]));
    }
    let mut metadata = Map::new();
    metadata.insert("name".into(), json!(name));
    if !config.annotations.is_empty() {
        let sorted: BTreeMap<&String, &String> = config.annotations.iter().collect();
        metadata.insert("annotations".into(), json!(sorted));
    }
    json!({"metadata": metadata, "spec": spec})
}

/// A DNS-1035 label (what Kubernetes requires of a Service name).
fn is_service_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && s.as_bytes()[0].is_ascii_lowercase()
        && !s.ends_with('-')
}

/// A DNS-1123 subdomain (what Kubernetes requires of a Secret name).
fn is_secret_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// The Services and Ingresses of item `i`'s ingress and service configs, over the ports of its
/// pod spec (Kubernetes JSON), named as Armada names them: `<pod>-service-<n>` (n counts the
/// ingress configs' services, then the service configs without a name), and
/// `<pod>-ingress-<n + 1>` beside the service `n` of an ingress config.
pub(super) fn objects(
    i: usize,
    item: &pb::JobSubmitRequestItem,
    pod_spec: &Json,
) -> Result<(Vec<Json>, Vec<Json>), Status> {
    let exposed = exposed_ports(pod_spec);
    let (mut services, mut ingresses) = (Vec::new(), Vec::new());
    let mut n = 0;
    let mut ingress_port_of: BTreeMap<u32, usize> = BTreeMap::new();
    for (k, config) in item.ingress.iter().enumerate() {
        let field = format!("job_request_items[{i}].ingress[{k}]");
        if pb::IngressType::try_from(config.r#type).is_err() {
            return Err(invalid(format_args!("{field}.type"), format!("{} is not an ingress type", config.r#type)));
        }
        for (j, p) in config.ports.iter().enumerate() {
            if let Some(other) = ingress_port_of.insert(*p, k).filter(|other| *other != k) {
                return Err(invalid(
                    format_args!("{field}.ports[{j}]"),
                    format!("port {p} is in ingress[{other}] already (a port has at most one ingress)"),
                ));
            }
        }
        if config.tls_enabled && !config.cert_name.is_empty() && !is_secret_name(&config.cert_name) {
            return Err(invalid(
                format_args!("{field}.cert_name"),
                format!("{:?} is not a Secret name (lower-case letters, digits, '-' and '.')", config.cert_name),
            ));
        }
        let ports = selected(&field, &config.ports, &exposed)?;
        let service_name = format!("{PLACEHOLDER_POD}-service-{n}");
        services.push(service(&service_name, "ClusterIP", config.use_cluster_ip, &ports));
        n += 1;
        ingresses.push(ingress(&format!("{PLACEHOLDER_POD}-ingress-{n}"), &service_name, config, &ports));
    }
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (k, config) in item.services.iter().enumerate() {
        let field = format!("job_request_items[{i}].services[{k}]");
        let (kind, cluster_ip) = match pb::ServiceType::try_from(config.r#type) {
            Ok(pb::ServiceType::NodePort) => ("NodePort", true),
            Ok(pb::ServiceType::Headless) => ("ClusterIP", false),
            Err(_) => {
                return Err(invalid(format_args!("{field}.type"), format!("{} is not a service type", config.r#type)));
            }
        };
        let ports = selected(&field, &config.ports, &exposed)?;
        let name = if config.name.is_empty() {
            n += 1;
            format!("{PLACEHOLDER_POD}-service-{}", n - 1)
        } else {
            if !is_service_name(&config.name) {
                return Err(invalid(
                    format_args!("{field}.name"),
                    format!(
                        "{:?} is not a Service name (at most 63 lower-case letters, digits and '-', starting with a letter)",
                        config.name
                    ),
                ));
            }
            if let Some(other) = names.insert(&config.name, k) {
                return Err(invalid(format_args!("{field}.name"), format!("services[{other}] has that name already")));
            }
            config.name.clone()
        };
        services.push(service(&name, kind, cluster_ip, &ports));
    }
    Ok((services, ingresses))
}

/// The Service and Ingress objects of an armadactl job file's `ingress` and `services` configs
/// (as Armada's YAML spells them: `type`, `ports`, `annotations`, `tlsEnabled`, `certName`,
/// `useClusterIP`, `name`), built as the gRPC API builds them. A refusal names the field within
/// the job (`ingress[0].ports[1]`).
pub fn from_job_file(
    pod_spec: &Json,
    ingress: &Json,
    services: &Json,
) -> Result<(Vec<Json>, Vec<Json>), (String, String)> {
    let refuse = |field: String, message: String| (field, message);
    let list = |v: &Json, field: &str| -> Result<Vec<Json>, (String, String)> {
        match v {
            Json::Null => Ok(Vec::new()),
            Json::Array(a) => Ok(a.clone()),
            _ => Err(refuse(field.into(), "must be a list".into())),
        }
    };
    let mut item = pb::JobSubmitRequestItem::default();
    for (k, c) in list(ingress, "ingress")?.iter().enumerate() {
        let field = format!("ingress[{k}]");
        item.ingress.push(pb::IngressConfig {
            r#type: enum_value(c.get("type"), &field, |s| pb::IngressType::from_str_name(s).map(|t| t as i32))?,
            ports: ports(c.get("ports"), &field)?,
            annotations: c
                .get("annotations")
                .and_then(Json::as_object)
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                .unwrap_or_default(),
            tls_enabled: c.get("tlsEnabled").and_then(Json::as_bool).unwrap_or(false),
            cert_name: c.get("certName").and_then(Json::as_str).unwrap_or_default().to_string(),
            use_cluster_ip: c.get("useClusterIP").and_then(Json::as_bool).unwrap_or(false),
        });
    }
    for (k, c) in list(services, "services")?.iter().enumerate() {
        let field = format!("services[{k}]");
        item.services.push(pb::ServiceConfig {
            r#type: enum_value(c.get("type"), &field, |s| pb::ServiceType::from_str_name(s).map(|t| t as i32))?,
            ports: ports(c.get("ports"), &field)?,
            name: c.get("name").and_then(Json::as_str).unwrap_or_default().to_string(),
        });
    }
    objects(0, &item, pod_spec).map_err(|status| {
        let text = status.message();
        let text = text.strip_prefix("job_request_items[0].").unwrap_or(text);
        match text.split_once(": ") {
            Some((field, message)) => (field.to_string(), message.to_string()),
            None => (String::new(), text.to_string()),
        }
    })
}

/// An enum field written by name (`NodePort`) or number; absent: the first value.
fn enum_value(v: Option<&Json>, field: &str, by_name: impl Fn(&str) -> Option<i32>) -> Result<i32, (String, String)> {
    match v {
        None | Some(Json::Null) => Ok(0),
        Some(Json::String(s)) => {
            by_name(s).ok_or_else(|| (format!("{field}.type"), format!("{s:?} is not one of Armada's types here")))
        }
        Some(Json::Number(n)) => n
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| (format!("{field}.type"), format!("{n} is not a type"))),
        Some(other) => Err((format!("{field}.type"), format!("{other} is not a type"))),
    }
}

/// A config's `ports`: container port numbers.
fn ports(v: Option<&Json>, field: &str) -> Result<Vec<u32>, (String, String)> {
    let Some(Json::Array(a)) = v else { return Ok(Vec::new()) };
    a.iter()
        .enumerate()
        .map(|(j, p)| {
            p.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| (format!("{field}.ports[{j}]"), format!("{p} is not a port number")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_armadactl_files_configs_become_the_same_objects_as_over_grpc() {
        let spec = spec();
        let ingress = json!([{"type": "Ingress", "ports": [8080], "tlsEnabled": true, "certName": "web-tls"}]);
        let services = json!([{"type": "NodePort", "ports": [9090]}]);
        let (svc, ing) = from_job_file(&spec, &ingress, &services).unwrap();
        let mut it = item();
        it.ingress.push(pb::IngressConfig {
            ports: vec![8080],
            tls_enabled: true,
            cert_name: "web-tls".into(),
            ..Default::default()
        });
        it.services.push(pb::ServiceConfig {
            r#type: pb::ServiceType::NodePort as i32,
            ports: vec![9090],
            name: String::new(),
        });
        assert_eq!((svc, ing), objects(0, &it, &spec).unwrap());
        let e = from_job_file(&spec, &json!([{"ports": [1234]}]), &Json::Null).unwrap_err();
        assert_eq!(e.0, "ingress[0].ports[0]", "{e:?}");
        let e = from_job_file(&spec, &Json::Null, &json!([{"type": "LoadBalancer", "ports": [8080]}])).unwrap_err();
        assert_eq!(e.0, "services[0].type", "{e:?}");
    }

    fn spec() -> Json {
        json!({"containers": [
            {"name": "main", "ports": [{"containerPort": 8080}, {"containerPort": 9090, "protocol": "UDP"},
                                       {"containerPort": 22, "hostPort": 2222}]},
            {"name": "side", "ports": [{"containerPort": 6000, "protocol": "TCP"}]}
        ]})
    }

    fn item() -> pb::JobSubmitRequestItem {
        pb::JobSubmitRequestItem::default()
    }

    #[test]
    fn an_ingress_config_is_a_service_and_an_ingress_with_a_host_per_port() {
        let mut it = item();
        it.ingress.push(pb::IngressConfig {
            ports: vec![9090, 8080],
            annotations: [("nginx.ingress.kubernetes.io/ssl-redirect".to_string(), "true".to_string())].into(),
            tls_enabled: true,
            ..Default::default()
        });
        it.ingress.push(pb::IngressConfig {
            ports: vec![6000],
            use_cluster_ip: true,
            tls_enabled: true,
            cert_name: "my-cert".into(),
            ..Default::default()
        });
        let (services, ingresses) = objects(0, &it, &spec()).unwrap();
        assert_eq!(
            services,
            vec![
                json!({"metadata": {"name": "{pod}-service-0"}, "spec": {"type": "ClusterIP", "clusterIP": "None",
                    "ports": [{"name": "main-8080", "port": 8080}, {"name": "main-9090", "port": 9090, "protocol": "UDP"}]}}),
                json!({"metadata": {"name": "{pod}-service-1"}, "spec": {"type": "ClusterIP",
                    "ports": [{"name": "side-6000", "port": 6000, "protocol": "TCP"}]}}),
            ]
        );
        let rule = |host: &str, service: &str, port: u32| {
            json!({"host": host, "http": {"paths": [{"path": "/", "pathType": "Prefix",
                "backend": {"service": {"name": service, "port": {"number": port}}}}]}})
        };
        assert_eq!(
            ingresses,
            vec![
                json!({"metadata": {"name": "{pod}-ingress-1",
                                    "annotations": {"nginx.ingress.kubernetes.io/ssl-redirect": "true"}},
                       "spec": {"rules": [rule("main-8080-{pod}.{namespace}{host_suffix}", "{pod}-service-0", 8080),
                                          rule("main-9090-{pod}.{namespace}{host_suffix}", "{pod}-service-0", 9090)],
                                "tls": [{"hosts": ["main-8080-{pod}.{namespace}{host_suffix}",
                                                   "main-9090-{pod}.{namespace}{host_suffix}"],
                                         "secretName": "{namespace}{cert_suffix}"}]}}),
                json!({"metadata": {"name": "{pod}-ingress-2"},
                       "spec": {"rules": [rule("side-6000-{pod}.{namespace}{host_suffix}", "{pod}-service-1", 6000)],
                                "tls": [{"hosts": ["side-6000-{pod}.{namespace}{host_suffix}"],
                                         "secretName": "my-cert"}]}}),
            ]
        );
        // The objects read as Kubernetes objects (what the REST submission checks).
        for s in &services {
            serde_json::from_value::<k8s_openapi::api::core::v1::Service>(s.clone()).unwrap();
        }
        for g in &ingresses {
            serde_json::from_value::<k8s_openapi::api::networking::v1::Ingress>(g.clone()).unwrap();
        }
    }

    #[test]
    fn service_configs_are_node_port_or_headless_services_named_after_the_ingress_ones() {
        let mut it = item();
        it.ingress.push(pb::IngressConfig { ports: vec![8080], ..Default::default() });
        it.services.push(pb::ServiceConfig {
            r#type: pb::ServiceType::NodePort as i32,
            ports: vec![6000],
            name: "".into(),
        });
        it.services.push(pb::ServiceConfig {
            r#type: pb::ServiceType::Headless as i32,
            ports: vec![8080, 6000],
            name: "workers".into(),
        });
        it.services.push(pb::ServiceConfig {
            r#type: pb::ServiceType::Headless as i32,
            ports: vec![9090],
            name: "".into(),
        });
        let (services, ingresses) = objects(0, &it, &spec()).unwrap();
        assert_eq!(ingresses.len(), 1);
        assert_eq!(
            services[1..],
            [
                json!({"metadata": {"name": "{pod}-service-1"}, "spec": {"type": "NodePort",
                    "ports": [{"name": "side-6000", "port": 6000, "protocol": "TCP"}]}}),
                json!({"metadata": {"name": "workers"}, "spec": {"type": "ClusterIP", "clusterIP": "None",
                    "ports": [{"name": "main-8080", "port": 8080}, {"name": "side-6000", "port": 6000, "protocol": "TCP"}]}}),
                json!({"metadata": {"name": "{pod}-service-2"}, "spec": {"type": "ClusterIP", "clusterIP": "None",
                    "ports": [{"name": "main-9090", "port": 9090, "protocol": "UDP"}]}}),
            ]
        );
    }

    #[test]
    fn bad_configs_name_the_armada_field() {
        type Add = Box<dyn Fn(&mut pb::JobSubmitRequestItem)>;
        let cases: Vec<(Add, &str)> = vec![
            (
                Box::new(|it| it.ingress.push(pb::IngressConfig { ports: vec![], ..Default::default() })),
                "job_request_items[2].ingress[1].ports: name at least one container port",
            ),
            (
                Box::new(|it| it.ingress.push(pb::IngressConfig { ports: vec![8080, 7], ..Default::default() })),
                "job_request_items[2].ingress[1].ports[1]: no container of the pod spec exposes port 7 (without a hostPort)",
            ),
            (
                Box::new(|it| it.ingress.push(pb::IngressConfig { ports: vec![22], ..Default::default() })),
                "job_request_items[2].ingress[1].ports[0]: no container of the pod spec exposes port 22 (without a hostPort)",
            ),
            (
                Box::new(|it| it.ingress.push(pb::IngressConfig { ports: vec![9090, 6000], ..Default::default() })),
                "job_request_items[2].ingress[1].ports[1]: port 6000 is in ingress[0] already (a port has at most one ingress)",
            ),
            (
                Box::new(|it| {
                    it.ingress.push(pb::IngressConfig { r#type: 4, ports: vec![9090], ..Default::default() })
                }),
                "job_request_items[2].ingress[1].type: 4 is not an ingress type",
            ),
            (
                Box::new(|it| {
                    it.ingress.push(pb::IngressConfig {
                        ports: vec![9090],
                        tls_enabled: true,
                        cert_name: "Bad_Cert".into(),
                        ..Default::default()
                    })
                }),
                "job_request_items[2].ingress[1].cert_name: \"Bad_Cert\" is not a Secret name (lower-case letters, digits, '-' and '.')",
            ),
            (
                Box::new(|it| it.services.push(pb::ServiceConfig { r#type: 9, ports: vec![9090], name: "".into() })),
                "job_request_items[2].services[0].type: 9 is not a service type",
            ),
            (
                Box::new(|it| it.services.push(pb::ServiceConfig { r#type: 0, ports: vec![], name: "".into() })),
                "job_request_items[2].services[0].ports: name at least one container port",
            ),
            (
                Box::new(|it| {
                    it.services.push(pb::ServiceConfig { r#type: 0, ports: vec![9090], name: "9lives".into() })
                }),
                "job_request_items[2].services[0].name: \"9lives\" is not a Service name (at most 63 lower-case letters, digits and '-', starting with a letter)",
            ),
            (
                Box::new(|it| {
                    it.services.push(pb::ServiceConfig { r#type: 0, ports: vec![9090], name: "a".into() });
                    it.services.push(pb::ServiceConfig { r#type: 1, ports: vec![8080], name: "a".into() });
                }),
                "job_request_items[2].services[1].name: services[0] has that name already",
            ),
        ];
        for (add, message) in cases {
            let mut it = item();
            it.ingress.push(pb::IngressConfig { ports: vec![6000], ..Default::default() });
            add(&mut it);
            let e = objects(2, &it, &spec()).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert_eq!(e.message(), message);
        }
    }

    #[test]
    fn a_port_exposed_twice_cannot_be_a_service_port() {
        let spec = json!({"containers": [{"name": "a", "ports": [{"containerPort": 80}]},
                                         {"name": "b", "ports": [{"containerPort": 80, "protocol": "UDP"}]}]});
        let mut it = item();
        it.services.push(pb::ServiceConfig { r#type: 0, ports: vec![80], name: "".into() });
        let e = objects(0, &it, &spec).unwrap_err();
        assert_eq!(
            e.message(),
            "job_request_items[0].services[0].ports[0]: port 80 is exposed twice in the pod spec (a-80 and b-80)"
        );
    }

    #[test]
    fn no_configs_no_objects() {
        assert_eq!(objects(0, &item(), &spec()).unwrap(), (vec![], vec![]));
    }
}
