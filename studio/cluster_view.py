"""The live view's cluster panel: world size and one row per node (host, ranks, steps/s,
connected since), from the nodes.json the run's master keeps (trainer.cluster.nodes.NodeMonitor).

Every run launched through the elastic launcher has one: a studio run with `nproc_per_node` > 1
or `max_nodes` > 1, and a CLI run (`python -m trainer --nproc N`, `python -m trainer master`)
alike; a plain one-process run has none and shows no panel. The file is data anyone could write:
every value is escaped. The worker command with the run's token appears only for the session
that started the run (it passes `join`); everyone else is told the token was shown there.
"""

from __future__ import annotations

import html
import time

from trainer.cluster.nodes import read_nodes

RECENT_LINES = 4  # connect / lost lines under the table (a CLI run's train.log has none of them)


def _since(started: object, now: float) -> str:
    if not isinstance(started, (int, float)):
        return "?"
    seconds = max(0.0, now - float(started))
    ago = (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.0f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )
    return f"{time.strftime('%H:%M:%S', time.localtime(float(started)))} ({ago} ago)"


def _number(value: object) -> str:
    return f"{value:,.0f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


def _row_html(row: dict, now: float) -> str:
    host = str(row.get("host", "?")) + (f" ({row['hostname']})" if row.get("hostname") else "")
    state = "lost" if row.get("lost") else "connected"
    cells = (
        host,
        row.get("ranks", "?"),
        _number(row.get("steps_per_second")),
        _since(row.get("connected_since"), now),
        state,
    )
    return f"<tr class='{state}'>" + "".join(f"<td>{html.escape(str(cell))}</td>" for cell in cells) + "</tr>"


def nodes_html(nodes: dict | None, join_command: str | None = None, now: float | None = None) -> str:
    """The panel for a nodes.json mapping (trainer.cluster.nodes.read_nodes); '' when there is none."""
    if not isinstance(nodes, dict):
        return ""
    now = time.time() if now is None else now
    escape = lambda value: html.escape(str(value))  # noqa: E731
    rows = [row for row in nodes.get("nodes") or [] if isinstance(row, dict)]
    live = [row for row in rows if not row.get("lost")]
    low, high = nodes.get("min_nodes", 1), nodes.get("max_nodes", 1)
    if nodes.get("finished"):
        state = "finished"
    elif len(live) < (low if isinstance(low, int) else 1):
        state = f"waiting for workers: {len(live)} of {escape(low)} node(s) needed"
    else:
        state = "training"
    head = (
        f"<div class='cluster-head'><b>World size {escape(nodes.get('world_size', 0))}</b> "
        f"· {len(live)} node(s) of {escape(low)}..{escape(high)} · master "
        f"<code>{escape(nodes.get('master', '?'))}</code> · {escape(state)}</div>"
    )
    body = "".join(_row_html(row, now) for row in rows)
    table = (
        "<table class='cluster-nodes'><thead><tr><th>host</th><th>ranks</th><th>steps/s</th>"
        f"<th>connected since</th><th>state</th></tr></thead><tbody>{body}</tbody></table>"
    )
    lines = [str(line) for line in (nodes.get("log") or [])][-RECENT_LINES:]
    recent = f"<pre class='cluster-log'>{escape(chr(10).join(lines))}</pre>" if lines else ""
    join = ""
    if join_command and not nodes.get("finished"):
        join = (
            f"<div class='cluster-join'>Start a worker on another machine (the token is shown only on "
            f"this page):<br><code>{escape(join_command)}</code></div>"
        )
    elif high not in (1, None) and not nodes.get("finished"):
        join = (
            "<div class='cluster-join'>This run accepts workers: <code>python -m trainer worker --master "
            f"{escape(nodes.get('master', '?'))} --token TOKEN</code> (the token was shown to the page or "
            "terminal that started the run)</div>"
        )
    return f"<div class='cluster-panel'>{head}{table}{join}{recent}</div>"


def run_nodes_html(run_dir: str | None, join_command: str | None = None) -> str:
    """The panel of the run in `run_dir` ('' for a run without a nodes.json)."""
    return nodes_html(read_nodes(run_dir), join_command) if run_dir else ""
