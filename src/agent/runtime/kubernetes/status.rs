//! A pod's status as a run event: phase, container exit codes and waiting reasons.

use crate::model::NodeFault;
use crate::model::api::RunEventKind;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// Reason for image pull failures.
pub(super) const REASON_IMAGE_PULL: &str = "image pull error";
/// Reason for a pod that could not be placed or admitted on its node.
pub(super) const REASON_UNSCHEDULABLE: &str = "unschedulable";

/// Waiting reasons that mean the image cannot be pulled.
const IMAGE_PULL_REASONS: &[&str] =
    &["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "RegistryUnavailable"];
/// Of those, the ones that are the job's own doing (a malformed image name): they do not count
/// against the node.
const JOB_IMAGE_REASONS: &[&str] = &["InvalidImageName"];
/// Pod failure reasons that mean the node went away or shut down (`Terminated` is what the
/// kubelet's graceful node shutdown sets).
const NODE_GONE_REASONS: &[&str] = &["NodeLost", "NodeShutdown", "Terminated"];
/// Waiting reasons that mean the container cannot be created as specified.
const CONFIG_REASONS: &[&str] = &["CreateContainerConfigError", "CreateContainerError"];
/// Pod failure reasons set by the kubelet when it refuses the pod: the node's fault.
const NODE_REASONS: &[&str] = &[
    "NodeAffinity",
    "NodeSelectorMismatch",
    "UnexpectedAdmissionError",
    "NodeLost",
    "NodeShutdown",
    "InvalidNodeInfo",
    "Evicted",
];

/// What a pod's status says about its run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Observation {
    /// The run event the status amounts to.
    pub kind: RunEventKind,
    /// Exit code of the first container that failed, else of the first that ended (0 for a
    /// succeeded pod).
    pub exit_code: Option<i32>,
    /// Short cause: `image pull error`, `unschedulable`, `deadline exceeded`, `oom killed`, …
    pub reason: Option<String>,
    /// Details from the container's or the pod's status.
    pub message: Option<String>,
    /// Set when the node, not the job, is to blame (see [`NodeFault`]).
    pub node_fault: Option<NodeFault>,
}

impl Observation {
    fn new(kind: RunEventKind) -> Self {
        Self { kind, exit_code: None, reason: None, message: None, node_fault: None }
    }
}

/// Whose fault a pod that failed or was refused for `pod_reason` is, if the node's.
fn node_fault_of(pod_reason: &str, ran: bool) -> Option<NodeFault> {
    if NODE_GONE_REASONS.contains(&pod_reason) {
        Some(NodeFault::NodeLost)
    } else if pod_reason == "Evicted" {
        // The kubelet evicts pods when the node runs short of memory or disk.
        Some(NodeFault::NodePressure)
    } else if !ran {
        Some(NodeFault::NotStarted)
    } else {
        None
    }
}

/// Classifies a pod; none when its status says nothing yet (no phase, or `Unknown`).
pub(super) fn classify(pod: &Pod) -> Option<Observation> {
    let status = pod.status.as_ref()?;
    let containers: Vec<&ContainerStatus> =
        status.init_container_statuses.iter().flatten().chain(status.container_statuses.iter().flatten()).collect();
    for cs in &containers {
        let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
            continue;
        };
        let reason = w.reason.as_deref().unwrap_or("");
        let mapped = if IMAGE_PULL_REASONS.contains(&reason) {
            REASON_IMAGE_PULL
        } else if CONFIG_REASONS.contains(&reason) {
            "container config error"
        } else {
            continue;
        };
        let mut o = Observation::new(RunEventKind::Failed);
        o.reason = Some(mapped.into());
        if mapped == REASON_IMAGE_PULL && !JOB_IMAGE_REASONS.contains(&reason) {
            o.node_fault = Some(NodeFault::ImagePull);
        }
        o.message = Some(match &w.message {
            Some(m) => format!("container {}: {reason}: {m}", cs.name),
            None => format!("container {}: {reason}", cs.name),
        });
        return Some(o);
    }
    match status.phase.as_deref()? {
        "Pending" => {
            let unschedulable = status.conditions.iter().flatten().find(|c| {
                c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable")
            });
            Some(match unschedulable {
                Some(c) => Observation {
                    kind: RunEventKind::Returned,
                    exit_code: None,
                    reason: Some(REASON_UNSCHEDULABLE.into()),
                    message: c.message.clone(),
                    node_fault: Some(NodeFault::NotStarted),
                },
                None => Observation::new(RunEventKind::Pending),
            })
        }
        "Running" => Some(Observation::new(RunEventKind::Running)),
        "Succeeded" => Some(Observation { exit_code: Some(0), ..Observation::new(RunEventKind::Succeeded) }),
        "Failed" => Some(failed(pod, &containers)),
        _ => None,
    }
}

fn failed(pod: &Pod, containers: &[&ContainerStatus]) -> Observation {
    let status = pod.status.as_ref();
    let pod_reason = status.and_then(|s| s.reason.as_deref()).unwrap_or("");
    let pod_message = status.and_then(|s| s.message.clone());
    let ran = containers.iter().any(|cs| {
        cs.state.as_ref().is_some_and(|s| s.running.is_some() || s.terminated.is_some())
            || cs.last_state.as_ref().is_some_and(|s| s.terminated.is_some())
    });
    if !ran && (pod_reason.starts_with("OutOf") || NODE_REASONS.contains(&pod_reason)) {
        return Observation {
            kind: RunEventKind::Returned,
            exit_code: None,
            reason: Some(REASON_UNSCHEDULABLE.into()),
            message: Some(format!("{pod_reason}: {}", pod_message.unwrap_or_default())),
            node_fault: node_fault_of(pod_reason, false),
        };
    }
    // The first container that failed (non-zero exit) says why; else the first that ended.
    let main: Vec<_> = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|cs| cs.state.as_ref()?.terminated.as_ref())
        .collect();
    let term = main.iter().find(|t| t.exit_code != 0).or(main.first()).copied();
    let mut o = Observation::new(RunEventKind::Failed);
    o.exit_code = term.map(|t| t.exit_code);
    o.reason = match (pod_reason, term.and_then(|t| t.reason.as_deref())) {
        ("DeadlineExceeded", _) => Some("deadline exceeded".into()),
        ("Evicted", _) => Some("evicted".into()),
        (_, Some("OOMKilled")) => Some("oom killed".into()),
        _ => None,
    };
    o.message = term.and_then(|t| t.message.clone()).or(pod_message);
    // A container killed for its own memory limit (`OOMKilled`) is the job's doing; an eviction
    // for the node's pressure, or the node going away, is not.
    o.node_fault = node_fault_of(pod_reason, true);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "status": status})).expect("pod")
    }

    #[test]
    fn phases_and_reasons() {
        assert_eq!(
            classify(&pod(serde_json::json!({"phase": "Pending"}))).map(|o| o.kind),
            Some(RunEventKind::Pending)
        );
        assert_eq!(classify(&pod(serde_json::json!({}))), None);
        let pull = classify(&pod(
            serde_json::json!({"phase": "Pending", "containerStatuses": [{"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}]}),
        ))
        .expect("observation");
        assert_eq!((pull.kind, pull.reason.as_deref()), (RunEventKind::Failed, Some(REASON_IMAGE_PULL)));
        assert!(pull.message.as_deref().is_some_and(|m| m.contains("no such image")));
        let unsched = classify(&pod(serde_json::json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/1 nodes"}]})))
            .expect("observation");
        assert_eq!(unsched.kind, RunEventKind::Returned);
        let oom = classify(&pod(
            serde_json::json!({"phase": "Failed", "containerStatuses": [{"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
        ))
        .expect("observation");
        assert_eq!(
            (oom.kind, oom.exit_code, oom.reason.as_deref()),
            (RunEventKind::Failed, Some(137), Some("oom killed"))
        );
        let refused = classify(&pod(
            serde_json::json!({"phase": "Failed", "reason": "OutOfcpu", "message": "Node didn't have enough resource"}),
        ))
        .expect("observation");
        assert_eq!(refused.kind, RunEventKind::Returned);
        let deadline =
            classify(&pod(serde_json::json!({"phase": "Failed", "reason": "DeadlineExceeded"}))).expect("observation");
        assert_eq!(deadline.reason.as_deref(), Some("deadline exceeded"));
    }
    #[test]
    fn node_faults_are_told_from_the_job_s_own() {
        let waiting = |reason: &str| {
            let status = serde_json::json!({"phase": "Pending", "containerStatuses": [{"name": "main", "image": "x",
                "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": reason}}}]});
            classify(&pod(status)).expect("observation").node_fault
        };
        assert_eq!(waiting("ImagePullBackOff"), Some(NodeFault::ImagePull));
        assert_eq!(waiting("ErrImagePull"), Some(NodeFault::ImagePull));
        assert_eq!(waiting("InvalidImageName"), None, "a malformed image name is the job's doing");
        assert_eq!(waiting("CreateContainerConfigError"), None);
        let unsched = classify(&pod(serde_json::json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
            "status": "False", "reason": "Unschedulable"}]})));
        assert_eq!(unsched.and_then(|o| o.node_fault), Some(NodeFault::NotStarted));
        let failed = |status: serde_json::Value| classify(&pod(status)).expect("observation");
        let refused = failed(serde_json::json!({"phase": "Failed", "reason": "OutOfmemory"}));
        assert_eq!((refused.kind, refused.node_fault), (RunEventKind::Returned, Some(NodeFault::NotStarted)));
        let lost = failed(serde_json::json!({"phase": "Failed", "reason": "NodeLost"}));
        assert_eq!((lost.kind, lost.node_fault), (RunEventKind::Returned, Some(NodeFault::NodeLost)));
        let ran = serde_json::json!([{"name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]);
        let evicted = failed(serde_json::json!({"phase": "Failed", "reason": "Evicted", "containerStatuses": ran}));
        assert_eq!((evicted.kind, evicted.node_fault), (RunEventKind::Failed, Some(NodeFault::NodePressure)));
        let shutdown = failed(serde_json::json!({"phase": "Failed", "reason": "Terminated", "containerStatuses": ran}));
        assert_eq!(shutdown.node_fault, Some(NodeFault::NodeLost));
        // Its own memory limit, or a non-zero exit: the job's.
        let oom = failed(serde_json::json!({"phase": "Failed", "containerStatuses": ran}));
        assert_eq!((oom.reason.as_deref(), oom.node_fault), (Some("oom killed"), None));
        let deadline =
            failed(serde_json::json!({"phase": "Failed", "reason": "DeadlineExceeded", "containerStatuses": ran}));
        assert_eq!(deadline.node_fault, None);
    }
}
