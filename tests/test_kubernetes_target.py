"""`hpclaunch render --target kubernetes` (launchers/targets/kubernetes.py).

Golden JobSets for the test cluster's and the A100 cluster's job shapes, each checked offline
against the Kubernetes API schemas (kubernetes-validate, strict: no unknown field passes) and
JobSet's published CRD schema (tests/fixtures/jobset); values from the job reach the pod as data,
checked with Kubernetes' own `$(NAME)` expansion rule; what the target cannot express is one line
each, exit 2.

Regenerate the goldens after an intended change with
UPDATE_GOLDEN=1 pytest tests/test_kubernetes_target.py -k golden, then review the diff like code.
"""
import copy
import json
import os
import subprocess
import sys

import pytest
import yaml

from hpclaunch.launchers.targets.kubernetes import render
from hpclaunch.spec.loading import resolve_job

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "golden")
JOB = os.path.join(GOLDEN, "job.yaml")
PROFILES = {name: os.path.join(GOLDEN, "profiles", f"k8s-{name}.yaml") for name in ("testcluster", "a100-hpc")}
CRD_SCHEMA = os.path.join(HERE, "fixtures", "jobset", "jobset-v1alpha2.schema.json")
# Native sidecars (an init container's restartPolicy: Always) are on by default from Kubernetes 1.29;
# 1.37 is the newest the validator bundles.
K8S_VERSIONS = ["1.29", "1.37"]


def _render(profile, *overrides):
    return render(resolve_job(JOB, [f"profile={PROFILES[profile]}", *overrides]))


def _doc(profile, *overrides):
    return yaml.safe_load(_render(profile, *overrides))


def _pod(doc):
    return doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def _container(doc, name):
    pod = _pod(doc)
    return next(c for c in pod["containers"] + pod.get("initContainers", []) if c["name"] == name)


@pytest.fixture(scope="module")
def k8s_validate(require):
    try:
        import kubernetes_validate
    except ImportError:
        require("kubernetes-validate is not installed (pip install '.[test]')", "tests/test_kubernetes_target.py")
    return kubernetes_validate


def _closed(schema):
    """The schema with every object that lists its properties allowing no others: the API server
    prunes an unknown field of a custom resource silently, which for us is a field that was lost."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    return [_closed(v) for v in schema] if isinstance(schema, list) else schema


def _crd_validators():
    import jsonschema
    with open(CRD_SCHEMA) as f:
        schema = json.load(f)
    return [jsonschema.Draft7Validator(schema), jsonschema.Draft7Validator(_closed(schema))]


def _as_job(doc):
    """The JobSet's Job template as the batch/v1 Job JobSet makes of it."""
    template = doc["spec"]["replicatedJobs"][0]["template"]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{doc['metadata']['name']}-node-0"},
            "spec": template["spec"]}


@pytest.mark.parametrize("profile", PROFILES)
def test_golden(profile):
    text = _render(profile)
    path = os.path.join(GOLDEN, f"kubernetes-{profile}.yaml")
    if os.environ.get("UPDATE_GOLDEN"):
        with open(path, "w") as f:
            f.write(text)
    assert os.path.exists(path), f"no golden file {path}: run UPDATE_GOLDEN=1 pytest {__file__}"
    with open(path) as f:
        assert text == f.read(), f"{path} differs; if the change is intended, regenerate it and review the diff"


@pytest.mark.parametrize("profile", PROFILES)
def test_the_jobset_is_valid_against_jobsets_crd_schema(profile):
    doc = _doc(profile)
    for validator in _crd_validators():
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(doc)]
        assert not errors, errors


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("profile", PROFILES)
def test_its_job_is_a_valid_kubernetes_job(profile, version, k8s_validate):
    assert k8s_validate.validate(_as_job(_doc(profile)), version, strict=True) == version


@pytest.mark.parametrize("break_it", [
    lambda d: d["spec"]["failurePolicy"].update(maxRestart=1),                 # a typo JobSet would prune
    lambda d: d["spec"]["replicatedJobs"][0].update(replicas="one"),
    lambda d: _pod(d)["containers"][0]["resources"].update(limits="lots"),
])
def test_the_crd_check_finds_a_broken_jobset(break_it):
    doc = _doc("testcluster")
    break_it(doc)
    assert any(list(v.iter_errors(doc)) for v in _crd_validators())


@pytest.mark.parametrize("break_it", [
    lambda j: _pod_of_job(j)["containers"][0].update(imagePullPolice="Always"),  # typo: strict refuses it
    lambda j: j["spec"].update(parallelism="two"),
    lambda j: _pod_of_job(j)["initContainers"][0].pop("image") and _pod_of_job(j)["initContainers"][0].pop("name"),
])
def test_the_kubernetes_check_finds_a_broken_job(break_it, k8s_validate):
    job = _as_job(_doc("testcluster"))
    break_it(job)
    with pytest.raises(k8s_validate.ValidationError):
        k8s_validate.validate(job, K8S_VERSIONS[-1], strict=True)


def _pod_of_job(job):
    return job["spec"]["template"]["spec"]


def expand(text, env):
    """Kubernetes' expansion of a container's command, args and env values (kubelet's
    third_party/forked/golang/expansion): `$$` is one `$`; `$(NAME)` is NAME's value when NAME is
    defined, else left as written; any other `$` stays."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env[name] if name in env else f"$({name})")
                    i = end + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def _pod_env(container):
    """The container's environment as the kubelet makes it: each value expanded over those before it."""
    env = {}
    for entry in container["env"]:
        env[entry["name"]] = f"<{entry['name']}>" if "valueFrom" in entry else expand(entry["value"], env)
    return env


HOSTILE = ["it's \"quoted\"", "$HOME and ${HOME}", "$(HPCLAUNCH_JOB_ID)", "$$(HOSTNAME)", "a `date` b",
           "two\nlines", "end$", "$(unclosed", "; rm -rf / #", "tab\there", "ünïcode"]


def test_env_and_command_reach_the_pod_as_data(write):
    job = {"name": "it's $(x)", "profile": PROFILES["testcluster"], "launcher": "torchrun",
           "command": ["python", "train.py"] + HOSTILE,
           "env": {f"V{i}": value for i, value in enumerate(HOSTILE)}}
    text = render(resolve_job(write("job.yaml", yaml.safe_dump(job))))
    doc = yaml.safe_load(text)
    trainer = _container(doc, "trainer")
    env = _pod_env(trainer)
    for i, value in enumerate(HOSTILE):
        assert env[f"V{i}"] == value
    assert env["HPCLAUNCH_JOB_NAME"] == "it's $(x)"
    args = [expand(a, env) for a in trainer["args"]]
    assert args[args.index("--no-python") + 1:] == ["python", "train.py"] + HOSTILE
    assert trainer["command"] == ["torchrun"]   # no shell anywhere: each word is one argument


def test_hpclaunchs_own_references_are_expanded():
    doc = _doc("testcluster")
    trainer = _container(doc, "trainer")
    env = _pod_env(trainer)
    assert env["HPCLAUNCH_RUN_DIR"] == "/hpclaunch/runs/golden-job-<HPCLAUNCH_JOB_ID>"
    assert env["HPCLAUNCH_LOG_DIR"] == "/hpclaunch/runs/golden-job-<HPCLAUNCH_JOB_ID>/logs/attempt<HPCLAUNCH_ATTEMPT>"
    args = [expand(a, env) for a in trainer["args"]]
    assert "--rdzv-endpoint=golden-job-node-0-0.golden-job.<HPCLAUNCH_NAMESPACE>.svc.cluster.local:29500" in args
    assert "--rdzv-id=<HPCLAUNCH_JOB_ID>" in args
    monitor = _container(doc, "monitor")
    menv = _pod_env(monitor)
    assert [expand(a, menv) for a in monitor["args"]][4:8] == [
        "--run-dir", env["HPCLAUNCH_RUN_DIR"], "--node-id", "<HPCLAUNCH_NODE_RANK>"]


def test_the_leader_is_pod_0_under_the_jobsets_subdomain():
    doc = _doc("testcluster", "resources.nodes=2")
    name = doc["metadata"]["name"]
    assert doc["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True}
    rj = doc["spec"]["replicatedJobs"][0]
    assert rj["replicas"] == 1
    assert {k: rj["template"]["spec"][k] for k in ("parallelism", "completions", "completionMode", "backoffLimit")} \
        == {"parallelism": 2, "completions": 2, "completionMode": "Indexed", "backoffLimit": 0}
    # JobSet names pod i `<jobset>-<replicated job>-<job index>-<i>`; pod 0 hosts the c10d store
    leader = f"{name}-{rj['name']}-0-0.{name}.$(HPCLAUNCH_NAMESPACE).svc.cluster.local"
    args = _container(doc, "trainer")["args"]
    assert f"--rdzv-endpoint={leader}:29500" in args and "--rdzv-backend=c10d" in args
    assert "--nnodes=2" in args and "--nproc-per-node=2" in args


@pytest.mark.parametrize("name,nodes", [("x" * 200, 16), ("Ünïcode & Co. / 2", 1), ("___", 1)])
def test_the_jobset_name_is_a_dns_label_that_leaves_room_for_its_pods(write, name, nodes):
    job = write("job.yaml", yaml.safe_dump({"name": name, "profile": PROFILES["testcluster"],
                                            "command": ["python", "t.py"], "resources": {"nodes": nodes}}))
    doc = yaml.safe_load(render(resolve_job(job)))
    js = doc["metadata"]["name"]
    import re
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", js), js
    assert len(f"{js}-node-0-{nodes - 1}") <= 63
    assert doc["metadata"]["annotations"]["hpclaunch/job-name"] == name  # the exact name, as data


def test_gpu_limits_cpus_memory_and_placement():
    gpu = _doc("a100-hpc")
    res = _container(gpu, "trainer")["resources"]
    assert res == {"requests": {"cpu": "64", "memory": "480Gi"}, "limits": {"memory": "480Gi", "nvidia.com/gpu": 4}}
    pod = _pod(gpu)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert pod["serviceAccountName"] == "trainer" and gpu["metadata"]["namespace"] == "ml-team"
    cpu = _container(_doc("testcluster"), "trainer")["resources"]
    assert cpu == {"requests": {"cpu": "2", "memory": "1000Mi"}, "limits": {"memory": "1000Mi"}}
    amd = _container(_doc("a100-hpc", "kubernetes.gpu_resource=amd.com/gpu"), "trainer")["resources"]
    assert amd["limits"] == {"memory": "480Gi", "amd.com/gpu": 4}


def test_the_kueue_queue_label_comes_from_the_profile_or_the_job(write):
    assert _doc("testcluster")["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert _doc("testcluster", "kubernetes.queue=team-b")["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-b"
    job = write("job.yaml", yaml.safe_dump(_job(kubernetes={"queue": None})))  # the job unsets the profile's
    assert "kueue.x-k8s.io/queue-name" not in yaml.safe_load(render(resolve_job(job)))["metadata"]["labels"]


def test_the_monitor_is_a_native_sidecar_on_the_shared_volume():
    doc = _doc("testcluster")
    monitor, trainer = _container(doc, "monitor"), _container(doc, "trainer")
    assert monitor["restartPolicy"] == "Always"           # a sidecar: it ends when the trainer has
    assert monitor["command"] == ["python3"] and monitor["args"][:2] == ["-m", "hpclaunch.monitors"]
    assert "--no-nvml" in monitor["args"]                  # no GPUs, and none visible to it
    runs = {"name": "runs", "mountPath": "/hpclaunch/runs"}
    assert runs in monitor["volumeMounts"] and runs in trainer["volumeMounts"]
    assert {"name": "runs", "persistentVolumeClaim": {"claimName": "hpclaunch-runs"}} in _pod(doc)["volumes"]
    gpu = _container(_doc("a100-hpc", "monitor.prometheus_port=9400"), "monitor")
    assert "--no-nvml" not in gpu["args"] and {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in gpu["env"]
    assert gpu["args"][-2:] == ["--prometheus-port", "9400"] and gpu["ports"] == [{"name": "metrics",
                                                                                    "containerPort": 9400}]
    assert "initContainers" not in _pod(_doc("testcluster", "monitor.interval=0"))


def test_time_limit_grace_and_attempts():
    doc = _doc("testcluster", "resources.time=00:30:00", "requeue.max_attempts=4", "requeue.grace=90")
    job = doc["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert job["activeDeadlineSeconds"] == 1800 - 90 and _pod(doc)["terminationGracePeriodSeconds"] == 90
    assert doc["spec"]["failurePolicy"] == {"maxRestarts": 3}
    once = _doc("testcluster", "requeue.max_attempts=1")
    assert once["spec"]["failurePolicy"] == {"maxRestarts": 0}
    assert once["spec"]["replicatedJobs"][0]["template"]["spec"]["activeDeadlineSeconds"] == 600
    assert "terminationGracePeriodSeconds" not in _pod(once)
    unlimited = _doc("testcluster", "resources.time=0", "requeue.max_attempts=1")
    assert "activeDeadlineSeconds" not in unlimited["spec"]["replicatedJobs"][0]["template"]["spec"]


def _hl(*args, cwd):
    return subprocess.run([sys.executable, "-m", "hpclaunch", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def _one_line(tmp_path, job, *overrides, command="render"):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    extra = ["--target", "kubernetes"] if command == "render" else []
    proc = _hl(command, "job.yaml", *extra, *[a for o in overrides for a in ("-o", o)], cwd=tmp_path)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and proc.stdout == "" and len(lines) == 1, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    return lines[0]


def _job(**kw):
    return {"name": "j", "profile": PROFILES["testcluster"], "command": ["python", "t.py"], **kw}


@pytest.mark.parametrize("launcher,why", [("mpi", "MPIJob"), ("horovod", "MPIJob"), ("srun", "Slurm's own"),
                                          ("ray", "RayJob"), ("tensorflow", "TFJob")])
def test_a_launcher_kubernetes_cannot_start_is_refused_naming_torchrun(tmp_path, launcher, why):
    line = _one_line(tmp_path, _job(launcher=launcher))
    assert line.startswith("job.yaml: launcher: the kubernetes target starts ranks with torchrun only"), line
    assert why in line and f"({launcher!r})" in line and "supported: torchrun" in line, line


@pytest.mark.parametrize("job,says", [
    ({"kubernetes": {"image": None}}, "job.yaml: kubernetes.image: is not set"),
    ({"kubernetes": {"runs_claim": None}}, "job.yaml: kubernetes.runs_claim: is not set"),
    ({"command": ["python", "t.py", "--lr", "{lr}"], "sweep": {"parameters": {"lr": [0.1, 0.2]}}},
     "job.yaml: sweep: a sweep is a Slurm job array"),
    ({"workdir": "src"}, "job.yaml: workdir: is relative"),
    ({"requeue": {"by": "program"}}, "job.yaml: requeue.by: the program requeues itself"),
])
def test_what_the_target_cannot_express_is_one_line_naming_field_and_fix(tmp_path, job, says):
    line = _one_line(tmp_path, _job(**job))
    assert line.startswith(says) and " \u2014 " in line, line


def test_each_problem_is_its_own_line(tmp_path):
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(_job(launcher="mpi", kubernetes={"image": None})))
    proc = _hl("render", "job.yaml", "--target", "kubernetes", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert [line.split(": ")[1] for line in proc.stderr.splitlines()] == ["launcher", "kubernetes.image"]


@pytest.mark.parametrize("override,field", [
    ("kubernetes.namespace=ML_Team", "kubernetes.namespace"),
    ("kubernetes.queue=" + "q" * 64, "kubernetes.queue"),
    ("kubernetes.image='my image'", "kubernetes.image"),
    ("kubernetes.node_selector={'bad key!': x}", "kubernetes.node_selector"),
    ("kubernetes.tolerations=[{key: k, operator: Sometimes}]", "kubernetes.tolerations[0].operator"),
    ("kubernetes.runs_path=relative/runs", "kubernetes.runs_path"),
    ("kubernetes.gpu_resource=gpu", "kubernetes.gpu_resource"),
])
@pytest.mark.parametrize("command", ["validate", "render"])
def test_a_bad_kubernetes_value_is_one_line_naming_file_field_and_fix(tmp_path, override, field, command):
    line = _one_line(tmp_path, _job(), override, command=command)
    assert line.startswith(f"command line (-o {override.split('=')[0]}): {field}: "), line
    assert " \u2014 " in line, line


def test_a_misspelt_key_is_one_line_with_a_suggestion(tmp_path):
    line = _one_line(tmp_path, _job(kubernetes={"imagee": "x"}), command="validate")
    assert line.startswith("job.yaml: kubernetes.imagee: unknown key") and "did you mean 'image'?" in line, line


def test_the_profiles_section_is_checked_where_it_is_written(tmp_path):
    prof = tmp_path / "hpc_profiles" / "k.yaml"
    prof.parent.mkdir()
    prof.write_text("name: k\nextends: testcluster\ndefaults:\n  kubernetes: {image: x, runs_claim: Runs}\n")
    line = _one_line(tmp_path, _job(profile=str(prof)))
    assert line.startswith("hpc_profiles/k.yaml: kubernetes.runs_claim: is not a valid claim name"), line


def test_a_job_without_kubernetes_renders_for_slurm_unchanged(tmp_path):
    # the section is optional: a Slurm job's resolved document does not grow a kubernetes: key
    from hpclaunch.spec.loading import resolve_job as rj
    doc = rj(JOB).to_document()
    assert doc["kubernetes"] is None


def test_rendering_is_deterministic():
    assert _render("a100-hpc") == _render("a100-hpc")


def test_the_goldens_are_documents_kubectl_reads(tmp_path):
    for profile in PROFILES:
        with open(os.path.join(GOLDEN, f"kubernetes-{profile}.yaml")) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        assert [(d["apiVersion"], d["kind"]) for d in docs] == [("jobset.x-k8s.io/v1alpha2", "JobSet")]
        assert copy.deepcopy(docs[0]) == _doc(profile)
