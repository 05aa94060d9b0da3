"""A job's `alerts:` section: the rules (with their thresholds), where alerts go, and how often.

Every rule has a default; a profile sets its site's under `defaults: {alerts: ...}` and a job file
overrides either (the usual layering, spec/loading.py). The sections below are written whole into
job.yaml and, as JSON, into the run directory's `.hpclaunch/alerts.json`, which the node monitor
reads (monitors/alerts.py): what the job was given is what it evaluates.

Secrets (a webhook's URL, an SMTP password) are never values here: a sink names the environment
variable that holds one (`url_env`, `password_env`; the job inherits the submitter's environment)
or a file only the user can read (`url_file`, `password_file`), read where the alert is sent.
"""
from __future__ import annotations

import re
from typing import Any, Dict, Iterator, List, Literal, Optional, Tuple

from dataclasses import dataclass

from hpclaunch.spec.typedload import field, pattern_check

SEVERITIES = ("info", "warning", "critical")
Severity = Literal["info", "warning", "critical"]
MAX_WEBHOOKS = 8
MAX_RECIPIENTS = 16

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_ADDRESS = re.compile(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253}")
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,252}")
_USER = re.compile(r"[A-Za-z0-9._%+@-]{1,128}")

_env_name = pattern_check(_ENV_NAME, "is not an environment variable name",
                          "name the variable that holds it (letters, digits, _), e.g. HPCLAUNCH_WEBHOOK_URL")


def _secret_file(value: str) -> Optional[Tuple[str, str]]:
    if not value.isprintable() or len(value) > 1024:
        return ("must be one line of printable text of at most 1024 characters", "give the file's path")
    if not (value.startswith("/") or value.startswith("~/")):
        return ("is not an absolute path", "give the file's full path (or ~/...), readable on the compute nodes, "
                "e.g. ~/.config/hpclaunch/webhook-url")
    return None


# (name, severity, where it is evaluated, threshold: (default, minimum, maximum, help) or None,
#  for_s: (default, help) or None, what it says). The table is the documentation's too (docs/alerts.md).
RULES: Tuple[Tuple[str, str, str, Optional[tuple], Optional[tuple], str], ...] = (
    ("job_failed", "critical", "login", None, None,
     "the job ended FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE or gave up"),
    ("xid", "critical", "node", None, None, "a GPU reported an XID error (one alert per GPU and code per episode)"),
    ("hw_slowdown", "critical", "node", None,
     (0.0, "seconds the hardware slowdown must last before the alert"),
     "hardware thermal slowdown or power-brake slowdown held a GPU's clocks down"),
    ("oom", "critical", "node", None, None,
     "a rank ran out of memory (CUDA's or the kernel's out-of-memory message in its log; Slurm's OUT_OF_MEMORY)"),
    ("hang", "critical", "node", None,
     (900.0, "seconds without a new metrics record from a rank that had started (train_entry's metrics)"),
     "a rank made no progress"),
    ("near_slowdown", "warning", "node",
     (5.0, 0.0, 50.0, "degrees C below the GPU's slowdown temperature"),
     (30.0, "seconds the GPU must stay that close"), "a GPU ran within THRESHOLD C of its slowdown temperature"),
    ("power_cap", "warning", "node",
     (50.0, 1.0, 100.0, "percent of the window the power cap held the clocks down"),
     (300.0, "the window, in seconds"), "power-cap throttling above THRESHOLD % of the time"),
    ("straggler", "warning", "node",
     (1.2, 1.01, 100.0, "a rank's median step time over the median of all ranks'"),
     (120.0, "seconds it must stay that slow"), "a rank's steps took THRESHOLD x the median rank's"),
    ("memory", "warning", "node",
     (95.0, 1.0, 100.0, "percent of the GPU's memory in use"),
     (30.0, "seconds it must stay that full"), "GPU memory above THRESHOLD %"),
    ("idle", "warning", "node",
     (1.0, 0.0, 100.0, "utilisation percent at or below which an allocated GPU counts as idle"),
     (600.0, "seconds it must stay idle"), "an allocated GPU idle (utilisation <= THRESHOLD %)"),
    ("job_completed", "info", "login", None, None, "the job completed, with its energy"),
    ("suggestions", "info", "login",
     (30.0, 1.0, 100.0, "idle share of GPU energy, and throttled share of GPU time, in percent, above which "
      "the report's figure becomes a suggestion"), None,
     "what the report suggests (idle energy, stragglers, throttling)"),
)
RULE_NAMES = tuple(r[0] for r in RULES)
SEVERITY_OF = {r[0]: r[1] for r in RULES}


def _rule_model(name: str, severity: str, where: str, threshold, for_s, says: str) -> type:
    """The model of one rule: `enabled`, and its `threshold` and `for_s` where it has them, with its defaults."""
    notes: Dict[str, Any] = {"enabled": bool}
    ns: Dict[str, Any] = {"__doc__": f"{severity}: {says} (evaluated on the {where} side).",
                          "enabled": field(True, help="evaluate this rule")}
    if threshold is not None:
        default, lo, hi, text = threshold
        notes["threshold"] = float
        ns["threshold"] = field(default, minimum=lo, maximum=hi, help=text)
    if for_s is not None:
        notes["for_s"] = float
        ns["for_s"] = field(for_s[0], minimum=0, maximum=86400, help=for_s[1])
    ns["__annotations__"] = notes
    ns["__module__"] = __name__
    return dataclass(type("".join(p.title() for p in name.split("_")) + "Rule", (), ns))


_RULE_MODELS = {r[0]: _rule_model(*r) for r in RULES}


def _rules_model() -> type:
    ns: Dict[str, Any] = {"__doc__": "Each alert rule: on or off, and its threshold and duration where it has them.",
                          "__annotations__": dict(_RULE_MODELS), "__module__": __name__}
    for name, cls in _RULE_MODELS.items():
        ns[name] = field(default_factory=cls)
    return dataclass(type("Rules", (), ns))


Rules = _rules_model()


@dataclass
class Webhook:
    """A chat webhook (Slack, Mattermost, Microsoft Teams workflow) or any notification URL apprise reads."""

    url_env: Optional[str] = field(None, check=_env_name,
                                   help="the environment variable holding the webhook's URL (the job inherits it)")
    url_file: Optional[str] = field(None, check=_secret_file,
                                    help="a file only you can read (mode 600) holding the URL on its first line")
    min_severity: Severity = field("warning", help="the least severity sent here")


@dataclass
class Email:
    """E-mail over SMTP."""

    to: List[str] = field(help="recipients", example="[me@example.org]",
                          check=lambda v: None if 1 <= len(v) <= MAX_RECIPIENTS and all(
                              _ADDRESS.fullmatch(a) for a in v) else
                          ("must be 1 to 16 e-mail addresses", "e.g. [me@example.org]"))
    sender: str = field("hpclaunch@localhost", help="the From address",
                        check=pattern_check(_ADDRESS, "is not an e-mail address", "e.g. hpclaunch@cluster.org"))
    smtp_host: str = field("localhost", help="the SMTP server",
                           check=pattern_check(_HOST, "is not a host name", "e.g. smtp.example.org"))
    smtp_port: int = field(25, minimum=1, maximum=65535, help="its port")
    security: Literal["none", "starttls", "ssl"] = field("none", help="plain SMTP, STARTTLS, or SMTP over TLS")
    user: Optional[str] = field(None, help="the SMTP login, if it needs one",
                                check=pattern_check(_USER, "is not a user name", "letters, digits and . _ % + @ -"))
    password_env: Optional[str] = field(None, check=_env_name, help="the environment variable holding its password")
    password_file: Optional[str] = field(None, check=_secret_file,
                                         help="a file only you can read (mode 600) holding the password")
    min_severity: Severity = field("warning", help="the least severity sent here")


@dataclass
class RateLimit:
    """At most `max` messages per sink in any `per_s` seconds; more wait, and go out together."""

    max: int = field(20, minimum=1, maximum=1000, help="messages per sink in the window")
    per_s: float = field(3600.0, minimum=1, maximum=86400, help="the window, in seconds")


@dataclass
class Alerts:
    """Alerts: rules evaluated by each node's monitor and at the job's end, and where they go (docs/alerts.md)."""

    enabled: bool = field(True, help="evaluate the rules (recorded in the run directory's alerts/)")
    rules: Rules = field(default_factory=Rules)
    resolve_after_s: float = field(60.0, minimum=0.1, maximum=86400,
                                   help="seconds a condition must stay clear before its episode is resolved")
    evaluate_every_s: float = field(5.0, minimum=0, maximum=60,
                                    help="seconds between the node monitor's looks at its samples for the sample "
                                    "rules (0: every sample); XIDs are seen at once")
    rate_limit: RateLimit = field(default_factory=RateLimit)
    timeout_s: float = field(5.0, minimum=0.5, maximum=60, help="seconds a sink may take to answer one message")
    terminal: bool = field(True, help="print alerts in `hpclaunch submit --wait`")
    webhooks: List[Webhook] = field(default_factory=list, help="chat webhooks (at most 8)")
    email: Optional[Email] = field(None, help="e-mail over SMTP")


def alerts_problems(alerts: Any, path: str = "alerts") -> Iterator[Tuple[str, str, Any, str]]:
    """(field path, message, value, fix) for each rule across fields of an `alerts:` section. Values
    that failed their own check are None and skipped."""
    if alerts is None:
        return
    hooks = alerts.webhooks or []
    if len(hooks) > MAX_WEBHOOKS:
        yield (f"{path}.webhooks", f"has {len(hooks)} entries (at most {MAX_WEBHOOKS})", len(hooks),
               "keep the ones you read")
    for i, hook in enumerate(hooks[:MAX_WEBHOOKS]):
        if hook is None:
            continue
        if (hook.url_env is None) == (hook.url_file is None):
            yield (f"{path}.webhooks[{i}]", "needs exactly one of url_env and url_file", None,
                   "name the environment variable holding the URL (url_env: NAME) or a file only you can read "
                   "(url_file: PATH); the URL itself never goes in a job file", )
    mail = alerts.email
    if mail is not None and mail.password_env is not None and mail.password_file is not None:
        yield (f"{path}.email", "sets both password_env and password_file", None, "keep one of them")
    if mail is not None and (mail.password_env or mail.password_file) and not mail.user:
        yield (f"{path}.email.user", "is needed with a password", None, "give the SMTP login: user: NAME")


def effective(doc: Optional[dict]) -> Optional[dict]:
    """The `alerts` mapping of a resolved job document (job.yaml's), or None when alerts are off."""
    if not isinstance(doc, dict) or not doc.get("enabled", False):
        return None
    return doc


def user_config_path() -> str:
    """The user's own alert settings: ``$XDG_CONFIG_HOME/hpclaunch/alerts.yaml`` (else ~/.config/...)."""
    import os
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "hpclaunch", "alerts.yaml")


def user_config() -> Optional[Tuple[str, dict]]:
    """(path, its `alerts:`-shaped mapping) when the user has one, else None: a layer between the
    profile's defaults and the job file (the user's webhook and address, for every job)."""
    import os
    from hpclaunch.common.errors import InvalidInput, Problem
    from hpclaunch.spec.yamlio import display_path, load_yaml_bytes, read_input_file
    path = user_config_path()
    if not os.path.exists(path):
        return None
    shown = display_path(path)
    data = load_yaml_bytes(read_input_file(path, "alert settings file"), shown)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise InvalidInput([Problem(shown, "", "is not a mapping of alert settings", fix="write the keys of a job "
                                    "file's alerts: section, e.g. webhooks: [{url_env: MY_WEBHOOK}]",
                                    has_value=False)])
    return shown, data
