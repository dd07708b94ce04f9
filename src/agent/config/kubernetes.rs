//! `[agent.kubernetes]`: the Kubernetes runtime's section (the cluster, the namespace, the node
//! inventory, pod deletion, and what the agent adds to the ingresses it creates), with the
//! Kubernetes name rules its keys are checked against.

use super::{AgentConfigError, invalid};
use crate::model::ExecutorName;
use crate::model::duration::serde_text;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// `[agent.kubernetes]`: run jobs as pods.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesConfig {
    /// Namespace the pods (and their services and ingresses) of jobs that name no namespace of
    /// their own are created in. Default: `default`.
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// Kubeconfig file. Default: in-cluster configuration when running in a pod, else
    /// `$KUBECONFIG` or `~/.kube/config`.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context. Default: the file's current context.
    #[serde(default)]
    pub context: Option<String>,
    /// Node label whose value is the node's pool; nodes without it are in pool `default`.
    /// Default: `convoy.io/pool`.
    #[serde(default = "default_pool_label")]
    pub pool_label: String,
    /// Time between refreshes of the node inventory (nodes and foreign pods; at least 1s).
    /// Default: 10s. Also read from `inventory_refresh_seconds`, its older spelling.
    #[serde(default = "default_inventory_refresh", alias = "inventory_refresh_seconds", with = "serde_text")]
    pub inventory_refresh: Duration,
    /// Delete a pod once its result was reported. Default: true.
    #[serde(default = "default_true")]
    pub delete_finished_pods: bool,
    /// Time past a kill's grace period after which a pod still present is deleted with grace
    /// period 0 (a node that does not answer). Default: 30s. Also read from
    /// `force_delete_after_seconds`, its older spelling.
    #[serde(default = "default_force_delete_after", alias = "force_delete_after_seconds", with = "serde_text")]
    pub force_delete_after: Duration,
    /// Lines of the pod's log sent with its final event (0: none). Default: 100.
    #[serde(default = "default_log_tail_lines")]
    pub log_tail_lines: u32,
    /// `[agent.kubernetes.ingress]`: what the agent adds to the ingresses it creates (Armada's
    /// executor ingress settings).
    #[serde(default)]
    pub ingress: IngressDefaults,
}

/// `[agent.kubernetes.ingress]`: the agent's part of a job's ingresses. The hosts and TLS secrets
/// of the ingresses built from Armada's ingress configs (docs/armada-grpc.md) end with these
/// suffixes, and every ingress the agent creates carries these annotations.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IngressDefaults {
    /// DNS suffix of the hosts (`<port>-<pod>.<namespace>.<host_suffix>`), e.g.
    /// `jobs.example.com`; where the placeholder `{host_suffix}` stands. Default: none (the host
    /// ends with the namespace).
    #[serde(default)]
    pub host_suffix: Option<String>,
    /// Suffix of the default TLS secret name (`<namespace>-<cert_name_suffix>`) of an ingress
    /// config with TLS and no `cert_name`; where `{cert_suffix}` stands. Default: none (the
    /// secret is named after the namespace).
    #[serde(default)]
    pub cert_name_suffix: Option<String>,
    /// Annotations set on every ingress the agent creates (e.g. the ingress class); an
    /// ingress's own annotation of the same key wins.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

impl Default for KubernetesConfig {
    fn default() -> Self {
        Self {
            namespace: default_namespace(),
            kubeconfig: None,
            context: None,
            pool_label: default_pool_label(),
            inventory_refresh: default_inventory_refresh(),
            delete_finished_pods: true,
            force_delete_after: default_force_delete_after(),
            log_tail_lines: default_log_tail_lines(),
            ingress: IngressDefaults::default(),
        }
    }
}

impl KubernetesConfig {
    /// Checks the section's keys (`agent.kubernetes.*`), and that `executor` can label pods; the
    /// error names the first offending key.
    pub(super) fn validate(&self, executor: &ExecutorName) -> Result<(), AgentConfigError> {
        if !is_dns_label(&self.namespace) {
            return Err(invalid("kubernetes.namespace", format!("{:?} is not a valid namespace name", self.namespace)));
        }
        if !is_label_value(executor.as_str()) {
            return Err(invalid(
                "executor",
                format!(
                    "{:?} must also be a valid Kubernetes label value (at most 63 letters, digits, '-', '_', '.') for the kubernetes runtime",
                    executor.as_str()
                ),
            ));
        }
        if self.pool_label.is_empty() {
            return Err(invalid("kubernetes.pool_label", "must not be empty"));
        }
        if self.inventory_refresh < Duration::from_secs(1) {
            return Err(invalid("kubernetes.inventory_refresh", "must be at least 1s"));
        }
        if let Some(h) = &self.ingress.host_suffix
            && !(h.len() <= 253 && h.split('.').all(is_dns_label))
        {
            return Err(invalid(
                "kubernetes.ingress.host_suffix",
                format!(
                    "{h:?} is not a DNS name (lower-case labels of letters, digits and '-', e.g. \"jobs.example.com\")"
                ),
            ));
        }
        if let Some(c) = &self.ingress.cert_name_suffix
            && !(c.len() <= 200 && c.split('.').all(is_dns_label))
        {
            return Err(invalid(
                "kubernetes.ingress.cert_name_suffix",
                format!("{c:?} cannot end a Secret name (lower-case letters, digits, '-' and '.')"),
            ));
        }
        Ok(())
    }
}

/// True if `s` is a valid Kubernetes label value (empty is valid).
pub(crate) fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && (s.is_empty()
            || (s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn default_namespace() -> String {
    "default".to_string()
}
fn default_pool_label() -> String {
    "convoy.io/pool".to_string()
}
fn default_inventory_refresh() -> Duration {
    Duration::from_secs(10)
}
fn default_true() -> bool {
    true
}
fn default_force_delete_after() -> Duration {
    Duration::from_secs(30)
}
fn default_log_tail_lines() -> u32 {
    100
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::config::AgentConfig;

    #[test]
    fn ingress_defaults_are_read_and_checked() {
        let mut c = AgentConfig::from_toml_str(
            "servers = [\"http://x\"]\nruntime = \"kubernetes\"\n[kubernetes.ingress]\nhost_suffix = \"jobs.example.com\"\ncert_name_suffix = \"wildcard\"\nannotations = { \"kubernetes.io/ingress.class\" = \"nginx\" }\n",
        )
        .unwrap();
        assert_eq!(
            c.kubernetes.ingress,
            IngressDefaults {
                host_suffix: Some("jobs.example.com".into()),
                cert_name_suffix: Some("wildcard".into()),
                annotations: [("kubernetes.io/ingress.class".to_string(), "nginx".to_string())].into(),
            }
        );
        c.validate().unwrap();
        c.kubernetes.ingress.host_suffix = Some(".example.com".into());
        assert!(
            c.validate().unwrap_err().to_string().contains("agent.kubernetes.ingress.host_suffix: \".example.com\"")
        );
        c.kubernetes.ingress.host_suffix = None;
        c.kubernetes.ingress.cert_name_suffix = Some("Tls".into());
        assert!(c.validate().unwrap_err().to_string().contains("agent.kubernetes.ingress.cert_name_suffix: \"Tls\""));
        let e =
            AgentConfig::from_toml_str("servers = [\"http://x\"]\n[kubernetes.ingress]\nhost = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("agent.kubernetes.ingress.host: unknown field"), "{e}");
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("abc-1.x_y"));
        assert!(!is_label_value("a:b"));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
