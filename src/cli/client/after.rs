//! `--after ID[:ok|notok|any]` of `convoy run` and `convoy submit`: Slurm's
//! `--dependency=afterok:ID` spelled per job (`ok` is the default; `notok` waits for a failure,
//! `any` for any end; `succeeded`, `failed` and `ended` are accepted too).

use convoy::model::api::JobDependency;
use convoy::model::{DependencyCondition, JobId};

/// Parses one `--after` value.
pub(crate) fn parse_after(s: &str) -> Result<JobDependency, String> {
    let (id, on) = match s.split_once(':') {
        Some((id, on)) => (id, on),
        None => (s, "ok"),
    };
    let job_id: JobId = id.parse().map_err(|e| format!("{id:?} is not a job id: {e}"))?;
    let on = DependencyCondition::parse(on)
        .ok_or_else(|| format!("{on:?} is not ok, notok or any (succeeded, failed or ended)"))?;
    Ok(JobDependency { job_id: Some(job_id), client_id: None, on })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_with_and_without_a_condition() {
        let id = "01JAAAAAAAAAAAAAAAAAAAAAAA";
        let d = parse_after(id).unwrap();
        assert_eq!((d.job_id.map(|j| j.to_string()), d.on), (Some(id.to_string()), DependencyCondition::Succeeded));
        assert_eq!(parse_after(&format!("{id}:notok")).unwrap().on, DependencyCondition::Failed);
        assert_eq!(parse_after(&format!("{id}:any")).unwrap().on, DependencyCondition::Ended);
        assert!(parse_after(&format!("{id}:later")).unwrap_err().contains("not ok, notok or any"));
        assert!(parse_after("nope:ok").unwrap_err().contains("not a job id"));
    }
}
