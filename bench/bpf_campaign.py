"""The BPF campaign of docs/validation.md: the thesis' BBR variants and the BPF port of BBR on the
kernel, beside the simulator.

    sudo .venv/bin/cctestbed sweep fidelity/bpf/NAME.toml -o results/bpf/NAME   # each kernel sweep
    .venv/bin/python bench/bpf_campaign.py sim       # the same sweeps on the simulator
    .venv/bin/python bench/bpf_campaign.py report    # tables; fidelity/bpf/summary.json

The summary keeps per point (algorithm x queue, per backend) the mean, min and max over the reps
of each metric, with the kernel version and the dates of the runs: no telemetry.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ["variants-loss", "variants-share", "variants-budget", "port-vs-builtin-cubic", "port-vs-builtin-deep"]
RESULTS = ROOT / "results" / "bpf"
SUMMARY = ROOT / "fidelity" / "bpf" / "summary.json"
METRICS = {  # name in the summary -> fidelity metric (cctestbed.fidelity.measure)
    "loss_pct": "loss_pct",
    "utilization_pct": "utilization_pct",
    "share_pct": "share.bbr",
    "queue_mean_bdp": "queue_mean_bdp",
    "rtt_p50_ms": "rtt_p50_ms",
    "retrans_pct": "retrans_pct",
    "jain": "jain",
}


def run_sim() -> None:
    import subprocess

    for name in SWEEPS:
        doc = tomllib.loads((ROOT / "fidelity" / "bpf" / f"{name}.toml").read_text())
        axes = doc["axes"]
        ccs = [c for c in axes.get("flows.0.cc", [doc["base"]["flows"][0]["cc"]]) if not c.startswith("bpf:")]
        if not ccs:
            continue
        lines = [f'name = "{doc["name"]}-sim"', f'trials = {doc["trials"]}', f'steady = {json.dumps(doc["steady"])}',
                 "", "[base]", f'duration = "{doc["base"]["duration"]}"', 'backend = "sim"', "", "[base.link]"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in doc["base"]["link"].items()]
        for f in doc["base"]["flows"]:
            lines += ["", "[[base.flows]]"] + [f"{k} = {json.dumps(v)}" for k, v in f.items()]
        lines += ["", "[axes]", f'"flows.0.cc" = {json.dumps(ccs)}']
        lines += [f'"{k}" = {_toml(v)}' for k, v in axes.items() if k != "flows.0.cc"]
        path = RESULTS / f"{name}-sim.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        subprocess.run([sys.executable, "-m", "cctestbed.cli", "sweep", str(path), "-o", str(RESULTS / f"{name}-sim"),
                        "--resume"], check=True)


def _toml(v: Any) -> str:
    """A TOML value: JSON's scalars and arrays, inline tables for dicts."""
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    return json.dumps(v)


def label(flow: dict[str, Any]) -> str:
    """A flow group's algorithm as the tables name it: its cc, with its params when it has any."""
    params = flow.get("params") or {}
    return flow["cc"] + ("" if not params else " (" + ", ".join(f"{k} = {v:g}" for k, v in sorted(params.items())) + ")")


def _trials(d: Path) -> list[dict[str, Any]]:
    """Every finished trial of a sweep directory (whatever version of the sweep ran it): its cc,
    queue, seed and fidelity metrics."""
    from cctestbed.fidelity.measure import metrics_of_dir

    out = []
    for t in sorted((d / "trials").glob("*")) if (d / "trials").exists() else []:
        if not (t / "summary.json").exists() or not (t / "trial.toml").exists():
            continue
        doc = tomllib.loads((t / "trial.toml").read_text())
        out.append({"key": t.name, "cc": label(doc["flows"][0]), "queue": doc["link"].get("queue"),
                    "seed": doc.get("seed"), "metrics": metrics_of_dir(t)})
    return out


def _points(trials: list[dict[str, Any]], backend: str) -> list[dict[str, Any]]:
    groups: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for t in trials:
        groups.setdefault((t["cc"], t["queue"]), []).append(t)
    out = []
    for (cc, queue), g in groups.items():
        row: dict[str, Any] = {"backend": backend, "cc": cc, "queue": queue, "reps": len(g),
                               "seeds": sorted(t["seed"] for t in g)}
        for m, col in METRICS.items():
            v = [float(t["metrics"][col]) for t in g if t["metrics"].get(col) is not None]
            if v:
                row[m] = {"mean": round(sum(v) / len(v), 4), "min": round(min(v), 4), "max": round(max(v), 4)}
        out.append(row)
    return out


def port_cells(name: str) -> list[dict[str, Any]]:
    """Fidelity cells, built-in bbr (as the reference) against the port, per queue of one sweep."""
    from cctestbed.fidelity.verdict import cells_for, tolerances

    trials = _trials(RESULTS / name)
    out = []
    for q in sorted({t["queue"] for t in trials}, key=str):
        reps = {cc: [t["metrics"] for t in trials if t["queue"] == q and t["cc"] == cc] for cc in ("bbr", "bpf:bbr")}
        if not reps["bbr"] or not reps["bpf:bbr"]:
            continue
        for c in cells_for(f"{name}:{q}", reps["bbr"], reps["bpf:bbr"], tolerances()):
            out.append({"scenario": c.scenario, "metric": c.metric, "builtin": c.kernel_mean, "port": c.sim_mean,
                        "builtin_n": c.kernel_n, "port_n": c.sim_n, "allowed": c.allowed, "verdict": c.verdict})
    return out


def sim_vs_kernel(name: str) -> list[dict[str, Any]]:
    """Fidelity cells of the simulator against the kernel per point (cc x queue) of one sweep."""
    from cctestbed.fidelity.verdict import cells_for, tolerances

    kt, st = _trials(RESULTS / name), _trials(RESULTS / f"{name}-sim")
    out = []
    for cc, q in sorted({(t["cc"], t["queue"]) for t in kt if not t["cc"].startswith("bpf:")}, key=str):
        kernel = [t["metrics"] for t in kt if (t["cc"], t["queue"]) == (cc, q)]
        sim = [t["metrics"] for t in st if (t["cc"], t["queue"]) == (cc, q)]
        if not sim:
            continue
        for c in cells_for(f"{name}:{cc}:{q}", kernel, sim, tolerances()):
            out.append({"scenario": c.scenario, "metric": c.metric, "kernel": c.kernel_mean, "sim": c.sim_mean,
                        "kernel_n": c.kernel_n, "sim_n": c.sim_n, "allowed": c.allowed, "verdict": c.verdict})
    return out


def report() -> None:
    import platform

    points: list[dict[str, Any]] = []
    dates: list[str] = []
    for name in SWEEPS:
        for suffix, backend in (("", "kernel"), ("-sim", "sim")):
            for row in _points(_trials(RESULTS / f"{name}{suffix}"), backend):
                points.append({"sweep": name, **row})
        d = RESULTS / name / "trials"
        if d.exists():
            for t in d.iterdir():
                k = t / "kernel.json"
                if k.exists():
                    dates.append(str(int(k.stat().st_mtime)))
    cells = [c for name in ("variants-loss", "port-vs-builtin-cubic", "port-vs-builtin-deep") for c in port_cells(name)]
    import datetime

    span = sorted(datetime.datetime.fromtimestamp(int(x), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M") for x in dates)
    doc = {"kernel": platform.release(), "runs_utc": [span[0], span[-1]] if span else [],
           "note": "80 Mbit/s, 25 ms, 60 s trials, steady window 20-60 s; kernel: userspace link emulator",
           "points": points, "port_vs_builtin": cells,
           "sim_vs_kernel": [c for n in ("variants-loss", "variants-share", "variants-budget") for c in sim_vs_kernel(n)]}
    lines = ["{"]  # one point or cell per line: small and diffable
    for i, (k, v) in enumerate(doc.items()):
        end = "," if i < len(doc) - 1 else ""
        if isinstance(v, list) and v and isinstance(v[0], dict):
            lines.append(f"{json.dumps(k)}: [")
            lines += [f"  {json.dumps(x)}{',' if j < len(v) - 1 else ''}" for j, x in enumerate(v)]
            lines.append(f"]{end}")
        else:
            lines.append(f"{json.dumps(k)}: {json.dumps(v)}{end}")
    SUMMARY.write_text("\n".join(lines + ["}"]) + "\n")
    print(markdown(points, cells))
    print("\nsimulator vs kernel, cells out of tolerance (loss, utilization, share, queue, RTT p50):")
    for c in doc["sim_vs_kernel"]:
        if c["verdict"] != "within" and c["metric"] in ("loss_pct", "utilization_pct", "share.bbr", "queue_mean_bdp",
                                                        "rtt_p50_ms"):
            print(f"  {c['scenario']} {c['metric']}: sim {c['sim']} kernel {c['kernel']} (allowed {c['allowed']})")
    print(f"wrote {SUMMARY}")


def _cell(points: list[dict[str, Any]], sweep: str, backend: str, cc: str, queue: Any, metric: str) -> str:
    for p in points:
        if (p["sweep"], p["backend"], p["cc"], p["queue"]) == (sweep, backend, cc, queue) and metric in p:
            m = p[metric]
            if p["reps"] > 1:
                return f"{m['mean']:.2f} ({m['min']:.2f}-{m['max']:.2f})"
            return f"{m['mean']:.2f} (1 rep)"
    return "-"


def markdown(points: list[dict[str, Any]], cells: list[dict[str, Any]]) -> str:
    """The tables of docs/validation.md."""
    out = ["| cc | backend | loss 0.5 BDP | loss 1 BDP | loss 2 BDP | share vs CUBIC 1.75 BDP | share vs CUBIC 4 BDP |",
           "|---|---|---|---|---|---|---|"]
    for cc in ("bbr", "bbr-shallow", "bbr-adaptive", "bbr-stable-rtprop", "bpf:bbr"):
        for backend in ("sim", "kernel"):
            if cc == "bpf:bbr" and backend == "sim":
                continue
            row = [_cell(points, "variants-loss", backend, cc, q, "loss_pct") for q in ("0.5bdp", "1bdp", "2bdp")]
            row += [_cell(points, "variants-share", backend, cc, q, "share_pct") for q in ("1.75bdp", "4bdp")]
            out.append(f"| {cc} | {backend} | " + " | ".join(row) + " |")
    out += ["", "| 4 flows, 0.5 BDP | backend | loss | utilization |", "|---|---|---|---|"]
    budget = [("variants-loss", "bbr"), ("variants-loss", "bbr-shallow"),
              ("variants-budget", label({"cc": "bbr", "params": {"tso_budget": 0}})),
              ("variants-budget", label({"cc": "bbr", "params": {"cwnd_gain": 1.5, "tso_budget": 0}}))]
    for sweep, cc in budget:
        for backend in ("sim", "kernel"):
            out.append(f"| {cc} | {backend} | {_cell(points, sweep, backend, cc, '0.5bdp', 'loss_pct')} | "
                       f"{_cell(points, sweep, backend, cc, '0.5bdp', 'utilization_pct')} |")
    n_within = sum(1 for c in cells if c["verdict"] == "within")
    out += ["", f"port vs built-in: {n_within} of {len(cells)} cells within tolerance (every metric)", "",
            "| scenario | metric | built-in bbr | BPF port | allowed | verdict |", "|---|---|---|---|---|---|"]
    for c in cells:
        if c["metric"] in ("utilization_pct", "loss_pct", "share.bbr", "queue_mean_bdp", "rtt_p50_ms", "jain"):
            f = lambda x: "-" if x is None else f"{x:.3g}"  # noqa: E731
            out.append(f"| {c['scenario']} | {c['metric']} | {f(c['builtin'])} | {f(c['port'])} | {f(c['allowed'])} | "
                       f"{c['verdict']} |")
    return "\n".join(out)


if __name__ == "__main__":
    {"sim": run_sim, "report": report}[sys.argv[1]]()
