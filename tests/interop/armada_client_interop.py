"""Drives a running Convoy server through Armada's own Python client (`armada-client`).

Run by the integration test `armada_python::armada_s_python_client_drives_convoy_up` with the
server's address as its only argument. Each step checks what Armada's clients rely on; the first
failure raises, which the test reports with this script's output. On success the last line is a
JSON summary the test reads.
"""

import json
import signal
import sys
import time

import grpc
from armada_client.armada import event_pb2, health_pb2, job_pb2, submit_pb2
from armada_client.client import ArmadaClient
from armada_client.k8s.io.api.core.v1 import generated_pb2 as core_v1
from armada_client.k8s.io.apimachinery.pkg.api.resource import (
    generated_pb2 as resource,
)
from armada_client.typings import JobState

# The whole conversation must end well within the test's own deadline.
signal.alarm(150)

QUEUE = "interop"
# Airflow's Armada operator names job sets after its run ids, which carry ':' and '+'.
JOB_SET = "scheduled__2026-11-23T10:00:00+00:00"
TERMINAL = {"succeeded", "failed", "cancelled", "preempted"}


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def expect_code(code, call, what):
    try:
        call()
    except grpc.RpcError as e:
        check(e.code() == code, f"{what}: expected {code}, got {e.code()}: {e.details()}")
        return e.details()
    raise AssertionError(f"{what}: expected {code}, the call succeeded")


def pod(script, cpu="100m"):
    quantity = {"cpu": resource.Quantity(string=cpu), "memory": resource.Quantity(string="64Mi")}
    return core_v1.PodSpec(
        restartPolicy="Never",
        terminationGracePeriodSeconds=1,
        containers=[
            core_v1.Container(
                name="main",
                image="busybox",
                command=["sh", "-c", script],
                resources=core_v1.ResourceRequirements(requests=quantity, limits=quantity),
            )
        ],
    )


def kind(message):
    return message.message.WhichOneof("events")


def job_of(message):
    return getattr(message.message, kind(message)).job_id


def main(address):
    client = ArmadaClient(grpc.insecure_channel(address))
    check(client.submit_health().status == health_pb2.HealthCheckResponse.SERVING, "Submit.Health")
    check(client.event_health().status == health_pb2.HealthCheckResponse.SERVING, "Event.Health")

    # Queues.
    client.create_queue(client.create_queue_request(QUEUE, priority_factor=1.0))
    expect_code(
        grpc.StatusCode.ALREADY_EXISTS,
        lambda: client.create_queue(client.create_queue_request(QUEUE, priority_factor=1.0)),
        "creating an existing queue",
    )
    client.update_queue(client.create_queue_request(QUEUE, priority_factor=2.0, user_owners=["alice"]))
    queue = client.get_queue(QUEUE)
    check((queue.name, queue.priority_factor, list(queue.user_owners)) == (QUEUE, 2.0, ["alice"]), f"GetQueue: {queue}")
    names = [q.name for q in client.get_queues()]
    check(QUEUE in names and "default" in names, f"GetQueues: {names}")
    client.create_queue(client.create_queue_request("interop-gone", priority_factor=1.0))
    client.delete_queue("interop-gone")
    expect_code(grpc.StatusCode.NOT_FOUND, lambda: client.get_queue("interop-gone"), "a deleted queue")

    # Submissions: one job that succeeds, one that fails; an invalid item refuses the batch.
    bad_item = client.create_job_request_item(priority=1, pod_spec=core_v1.PodSpec(), namespace="default")
    detail = expect_code(
        grpc.StatusCode.INVALID_ARGUMENT,
        lambda: client.submit_jobs(QUEUE, JOB_SET, [client.create_job_request_item(pod_spec=pod("true")), bad_item]),
        "a batch with a pod spec without containers",
    )
    check("job_request_items[1]" in detail, f"the refusal names the item: {detail}")
    expect_code(
        grpc.StatusCode.NOT_FOUND,
        lambda: client.submit_jobs("no-such-queue", JOB_SET, [client.create_job_request_item(pod_spec=pod("true"))]),
        "a submission to an unknown queue",
    )
    items = [
        client.create_job_request_item(
            priority=1, pod_spec=pod("echo hello from python"), namespace="default", client_id="py-ok",
            labels={"origin": "python"}, annotations={"armadaproject.io/externalJobUri": "airflow://dag/run/ok"},
        ),
        client.create_job_request_item(priority=1, pod_spec=pod("exit 3"), namespace="default", client_id="py-bad"),
    ]
    response = client.submit_jobs(QUEUE, JOB_SET, items)
    check(all(not r.error for r in response.job_response_items), f"SubmitJobs: {response}")
    ok, bad = [r.job_id for r in response.job_response_items]
    again = client.submit_jobs(QUEUE, JOB_SET, items[:1])
    check(again.job_response_items[0].job_id == ok, "a resubmission with the same client_id is the same job")

    # Events until both jobs are over.
    seen = []
    done = {}
    for message in client.get_job_events_stream(QUEUE, JOB_SET):
        seen.append(message)
        event = client.unmarshal_event_response(message)
        if event.type.value in TERMINAL:
            done[job_of(message)] = event.type.value
        if len(done) == 2:
            break
    check(done == {ok: "succeeded", bad: "failed"}, f"the jobs ended {done}")
    ids = [int(m.id) for m in seen]
    check(ids == list(range(ids[0], ids[0] + len(ids))), f"message ids without gaps: {ids}")
    kinds = {job: [kind(m) for m in seen if job_of(m) == job] for job in (ok, bad)}
    check(kinds[ok][0] == "submitted" and kinds[ok][-1] == "succeeded", f"events of {ok}: {kinds[ok]}")
    check("running" in kinds[ok] and "leased" in kinds[ok], f"events of {ok}: {kinds[ok]}")
    failed = [getattr(m.message, "failed") for m in seen if kind(m) == "failed"][0]
    codes = [c.exitCode for c in failed.container_statuses]
    check(codes == [3], f"the failed event carries the exit code: {failed}")

    # Resuming after a message id gives exactly what followed it.
    middle = seen[2].id
    resumed = list(
        client.event_stub.GetJobSetEvents(
            event_pb2.JobSetRequest(queue=QUEUE, id=JOB_SET, from_message_id=middle, watch=False)
        )
    )
    check([m.id for m in resumed] == [m.id for m in seen[3:]], "resuming after an id: no gaps, no duplicates")
    expect_code(
        grpc.StatusCode.NOT_FOUND,
        lambda: list(
            client.event_stub.GetJobSetEvents(
                event_pb2.JobSetRequest(queue=QUEUE, id="never-submitted", watch=False, errorIfMissing=True)
            )
        ),
        "errorIfMissing on an empty job set",
    )

    # Job queries.
    states = client.get_job_status([ok, bad, "not-a-job"]).job_states
    check(
        (states[ok], states[bad], states["not-a-job"]) == (submit_pb2.SUCCEEDED, submit_pb2.FAILED, submit_pb2.UNKNOWN),
        f"GetJobStatus: {states}",
    )
    by_uri = client.get_job_status_by_external_job_uri(QUEUE, JOB_SET, "airflow://dag/run/ok").job_states
    check(dict(by_uri) == {ok: submit_pb2.SUCCEEDED}, f"GetJobStatusUsingExternalJobUri: {by_uri}")
    details = client.get_job_details([ok]).job_details[ok]
    check((details.queue, details.jobset, details.state) == (QUEUE, JOB_SET, submit_pb2.SUCCEEDED), f"details: {details}")
    check(len(details.job_runs) == 1, f"one run: {details.job_runs}")
    run = details.job_runs[0]
    check(run.state == job_pb2.RUN_STATE_SUCCEEDED and run.run_id == details.latest_run_id, f"the run: {run}")
    check(run.started_ts.seconds > 0 and run.finished_ts.seconds >= run.started_ts.seconds, f"run times: {run}")
    errors = client.get_job_errors([bad, ok]).job_errors
    check("exit code 3" in errors[bad] and errors[ok] == "", f"GetJobErrors: {errors}")

    # Cancel, reprioritize and preempt on a second job set of long jobs.
    long_set = JOB_SET + " long"
    response = client.submit_jobs(
        QUEUE, long_set, [client.create_job_request_item(pod_spec=pod("sleep 300")) for _ in range(3)]
    )
    first, second, third = [r.job_id for r in response.job_response_items]
    results = client.reprioritize_jobs(new_priority=7, job_ids=[first], job_set_id=long_set, queue=QUEUE)
    check(dict(results.reprioritization_results) == {first: ""}, f"ReprioritizeJobs: {results}")
    cancelled = client.cancel_jobs(QUEUE, long_set, job_id=second)
    check(list(cancelled.cancelled_ids) == [second], f"CancelJobs: {cancelled}")
    deadline = time.monotonic() + 60
    while client.get_job_status([first]).job_states[first] != submit_pb2.RUNNING:
        check(time.monotonic() < deadline, "the first long job runs")
        time.sleep(0.2)
    client.preempt_jobs(QUEUE, long_set, first)
    client.cancel_jobset(QUEUE, long_set, [JobState.QUEUED, JobState.RUNNING, JobState.PENDING, JobState.LEASED])
    ended = {}
    for message in client.get_job_events_stream(QUEUE, long_set):
        event = client.unmarshal_event_response(message)
        if event.type.value in TERMINAL:
            ended[job_of(message)] = event.type.value
        if len(ended) == 3:
            break
    check(ended == {first: "preempted", second: "cancelled", third: "cancelled"}, f"the long jobs ended {ended}")
    kinds = [kind(m) for m in client.event_stub.GetJobSetEvents(
        event_pb2.JobSetRequest(queue=QUEUE, id=long_set, watch=False))]
    check("reprioritized" in kinds, f"a reprioritized event: {kinds}")

    print(json.dumps({"ok": True, "jobs": [ok, bad, first, second, third], "events": len(seen)}))


if __name__ == "__main__":
    main(sys.argv[1])
