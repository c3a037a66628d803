"""Reading the Coder template in `templates/` (Terraform) with python-hcl2, for the tests that check them.

Across versions python-hcl2 may keep the quotes of string literals and block
labels, wrap expressions in `${…}`, keep heredocs raw (`<<-EOT … EOT`), and add
bookkeeping keys (`__is_block__`, `__comments__`). `load` removes all of that.
"""

from __future__ import annotations

import functools
import re
import textwrap
from pathlib import Path
from typing import Any

import hcl2

TEMPLATES = Path(__file__).resolve().parents[1] / "templates"
DRIVERS = ("runner", "agentapi")
# A module's count that picks a driver: `var.driver == "<driver>" ? <count> : 0`.
_PICKED = re.compile(r'var\.driver == "(\w+)" \? (.+) : 0')

_HEREDOC = re.compile(r"\A<<(-?)([A-Za-z_][A-Za-z0-9_]*)\n(.*?)\n?[ \t]*\2[ \t]*\Z", re.DOTALL)


def _unquote(s: str) -> str:
    if len(s) >= 2 and s[0] == s[-1] == '"':
        return re.sub(r'\\(["\\nt])', lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), s[1:-1])
    return s


def _unwrap(s: str) -> str:
    """`${expr}` → `expr` when the whole string is one interpolation."""
    if not (s.startswith("${") and s.endswith("}")):
        return s
    depth = 0
    for i, ch in enumerate(s[1:], start=1):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0 and i != len(s) - 1:
            return s  # `${a}-${b}`: a template, not one expression
    return s[2:-1].strip()


def norm_str(s: str) -> str:
    s = _unquote(s)
    heredoc = _HEREDOC.match(s)
    if heredoc:
        body = heredoc[3]
        return textwrap.dedent(body) + "\n" if heredoc[1] else body + "\n"
    return _unwrap(s)


def norm(value: Any) -> Any:
    if isinstance(value, dict):
        return {norm_str(k): norm(v) for k, v in value.items() if not str(k).startswith("__")}
    if isinstance(value, list):
        return [norm(v) for v in value]
    if isinstance(value, str):
        return norm_str(value)
    return value


def load(path: Path) -> dict[str, Any]:
    """The template at `path`, normalised."""
    with path.open() as f:
        found: dict[str, Any] = norm(hcl2.load(f))
        return found


def as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def labelled(doc: dict[str, Any], kind: str) -> dict[tuple[str, str], dict[str, Any]]:
    """Two-label blocks (`data`, `resource`): {(type, name): body}."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in as_list(doc.get(kind)):
        for type_, named_ in entry.items():
            for item in as_list(named_):
                for name, body in item.items():
                    for one in as_list(body):
                        assert (type_, name) not in found, f"{kind} {type_}.{name} declared twice"
                        found[(type_, name)] = one
    return found


def of_type(doc: dict[str, Any], kind: str, type_: str) -> dict[str, dict[str, Any]]:
    """The `kind` blocks (`data`, `resource`) of one type, by their Terraform name."""
    return {name: body for (t, name), body in labelled(doc, kind).items() if t == type_}


def named(doc: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """One-label blocks (`module`, `variable`): {name: body}."""
    found: dict[str, dict[str, Any]] = {}
    for entry in as_list(doc.get(kind)):
        for name, body in entry.items():
            for one in as_list(body):
                assert name not in found, f"{kind} {name} declared twice"
                found[name] = one
    return found


def merged(doc: dict[str, Any], kind: str) -> dict[str, Any]:
    """Unlabelled blocks that may repeat (`locals`, `terraform`): their bodies merged."""
    out: dict[str, Any] = {}
    for body in as_list(doc.get(kind)):
        out.update(body)
    return out


def flag(value: Any) -> Any:
    """HCL bools as Python bools, whether python-hcl2 gave `true` or "true"."""
    return {"true": True, "false": False}.get(value, value) if isinstance(value, str) else value


def parameters(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """coder_parameter blocks by their `name` (not their Terraform label, kept as `_label`)."""
    out: dict[str, dict[str, Any]] = {}
    for label, body in of_type(doc, "data", "coder_parameter").items():
        assert body["name"] not in out, f"parameter {body['name']} declared twice"
        out[body["name"]] = {**body, "_label": label}
    return out


def presets(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """coder_workspace_preset blocks by their `name`."""
    return {body["name"]: body for body in of_type(doc, "data", "coder_workspace_preset").values()}


def options(param: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": o.get("name", ""), "value": o["value"], "description": o.get("description", "")}
            for o in as_list(param.get("option"))]


def validation(param: dict[str, Any]) -> dict[str, Any]:
    blocks = as_list(param.get("validation"))
    return blocks[0] if blocks else {}


def parameter_ref(param: dict[str, Any]) -> str:
    """How the template refers to a parameter's value: `data.coder_parameter.<label>.value`."""
    return f"data.coder_parameter.{param['_label']}.value"


@functools.cache
def load_dir(path: Path) -> dict[str, Any]:
    """Every `*.tf` of one module directory, as one document (python-hcl2 is slow: each is read once)."""
    doc: dict[str, Any] = {}
    for tf in sorted(path.glob("*.tf")):
        for kind, blocks in load(tf).items():
            doc.setdefault(kind, []).extend(as_list(blocks))
    return doc


def _inline(root: dict[str, Any], call: dict[str, Any], module: dict[str, Any]) -> None:
    """A local module's blocks into `root`, its `var.x` replaced by what the call passes (else the default).

    Checks what `terraform validate` would: the call passes only declared variables and every one without a
    default; the module reads only declared variables.
    """
    declared = named(module, "variable")
    passed = {k: v for k, v in call.items() if k not in ("source", "count", "version", "providers", "depends_on")}
    assert set(passed) <= set(declared), f"{call['source']} declares no {sorted(set(passed) - set(declared))}"
    missing = [n for n, v in declared.items() if "default" not in v and n not in passed]
    assert not missing, f"{call['source']} needs {missing}"
    values = {n: str(passed.get(n, declared[n].get("default"))) for n in declared}

    def bind(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: bind(v) for k, v in value.items()}
        if isinstance(value, list):
            return [bind(v) for v in value]
        if isinstance(value, str):
            for name in re.findall(r"\bvar\.(\w+)", value):
                assert name in values, f"{call['source']} reads undeclared var.{name}"
            return re.sub(r"\bvar\.(\w+)", lambda m: values[m[1]], value)
        return value

    for kind, blocks in module.items():
        if kind in ("variable", "output", "terraform"):
            continue
        for block in as_list(bind(blocks)):
            if kind == "data":  # a data source the root reads the same way is the root's
                known = labelled(root, "data")
                block = {t: [{n: b for n, b in item.items() if known.get((t, n)) != b} for item in as_list(items)]
                         for t, items in block.items()}
                block = {t: items for t, items in block.items() if any(items)}
                if not block:
                    continue
            root.setdefault(kind, []).append(block)


@functools.cache
def template(driver: str, path: Path = TEMPLATES / "fleet-agent") -> dict[str, Any]:
    """The template as Coder builds it when pushed with `--variable driver=<driver>`: the root's blocks, the
    blocks of each local module counted in for `driver` inlined, and the registry modules counted in (their
    `count` the one the driver gives them). Modules counted in for another driver are left out. Read once per
    process: callers only read it."""
    assert driver in DRIVERS, driver
    root = load_dir(path)
    doc = {kind: list(blocks) for kind, blocks in root.items() if kind != "module"}
    for name, call in named(root, "module").items():
        picked = _PICKED.fullmatch(str(call.get("count", "")))
        if picked and picked[1] not in DRIVERS:
            raise AssertionError(f"module {name} is counted in for no driver: {call['count']}")
        if picked and picked[1] != driver:
            continue
        call = {**call, "count": picked[2]} if picked else call
        if call["source"].startswith("./"):
            _inline(doc, call, load_dir(path / call["source"]))
        else:
            doc.setdefault("module", []).append({name: call})
    return doc
