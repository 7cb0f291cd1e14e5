"""The studio's node panel for an actor-learner run (issue 24, item 4): the actors get a table of
their own (actor, host, steps/s, policy lag, batches, how long connected, lost) and the learner's
queue depth and dropped batches join the summary line; a synchronous run's panel is unchanged.

The nodes.json here is written by hand in the shape trainer/cluster/nodes.py writes it."""

from __future__ import annotations

import json
import time

from studio.cluster_view import nodes_html
from trainer.cluster.nodes import read_nodes
from trainer.run.layout import NODES_FILE

NOW = time.time()
RANK_ROW = {
    "host": "10.0.0.5",
    "hostname": "gpu-box",
    "ranks": 1,
    "steps_per_second": 9000.0,
    "connected_since": NOW - 600,
    "lost": False,
}
ACTOR_ROWS = [
    {
        "role": "actor",
        "actor": 0,
        "host": "10.0.0.7",
        "hostname": "cpu-a",
        "steps_per_second": 4321.6,
        "policy_lag": 1.26,
        "batches": 1200,
        "connected_since": NOW - 45,
        "lost": False,
    },
    {
        "role": "actor",
        "actor": 1,
        "host": "10.0.0.8",
        "hostname": "<b>cpu-b</b>",
        "steps_per_second": 870.0,
        "policy_lag": 7.0,
        "batches": 95,
        "connected_since": NOW - 1800,
        "lost": True,
    },
]
SYNCHRONOUS = {
    "master": "10.0.0.5:54321",
    "world_size": 1,
    "nodes": [RANK_ROW],
    "log": ["12:00:00 Worker connected: 10.0.0.5 (1 processes); 1 of 1..1 nodes"],
    "min_nodes": 1,
    "max_nodes": 1,
    "finished": False,
    "updated": NOW,
}
ACTOR_LEARNER = {  # what trainer.cluster.nodes.write_actor_table writes: actor rows only
    **SYNCHRONOUS,
    "nodes": ACTOR_ROWS,
    "learner": {"queue_depth": 3, "dropped_batches": 17, "actors": 1},
    "log": ["12:01:00 Actor connected: 10.0.0.7", "12:20:00 Actor lost: 10.0.0.8"],
}


def table_rows(panel: str, css_class: str) -> list[str]:
    table = panel.split(f"<table class='{css_class}'>")[1].split("</table>")[0]
    return table.split("<tbody>")[1].split("</tbody>")[0].split("</tr>")[:-1]


def test_actors_get_their_own_table_and_the_learners_queue_is_in_the_summary(tmp_path):
    (tmp_path / NODES_FILE).write_text(json.dumps(ACTOR_LEARNER))
    assert read_nodes(tmp_path) == ACTOR_LEARNER  # the studio reads it through the master's reader
    panel = nodes_html(read_nodes(tmp_path), now=NOW)
    head = panel.split("<div class='cluster-head'>")[1].split("</div>")[0]
    assert "Learner" in head and "1 actor(s)" in head and "10.0.0.5:54321" in head and "training" in head
    assert "queue depth 3" in head and "dropped batches 17" in head
    assert "World size" not in head and "waiting" not in head  # actors are not ranks, nor missing nodes
    assert "cluster-nodes" not in panel  # no rank rows: no empty ranks table
    actors = table_rows(panel, "cluster-actors")
    assert len(actors) == 2
    live, lost = actors
    assert "<td>0</td>" in live and "10.0.0.7 (cpu-a)" in live and "4,322" in live
    assert "<td>1.3</td>" in live and "1,200" in live and "<td>45 s</td>" in live and "connected" in live
    assert "<td>1</td>" in lost and "<td>7.0</td>" in lost and "<td>95</td>" in lost
    assert "<td>30 min</td>" in lost and "class='lost'" in lost
    assert "<b>cpu-b</b>" not in panel and "&lt;b&gt;cpu-b&lt;/b&gt;" in panel  # data, escaped
    assert "Actor lost: 10.0.0.8" in panel
    assert "--role actor --token TOKEN" in panel  # how to add an actor; the token is not there


def test_a_synchronous_runs_panel_has_no_actor_table_and_no_queue():
    panel = nodes_html(SYNCHRONOUS, now=NOW)
    assert "cluster-actors" not in panel and "queue depth" not in panel and "--role" not in panel
    assert len(table_rows(panel, "cluster-nodes")) == 1
    assert "This run accepts" not in panel  # max_nodes 1: nobody can join a synchronous one-node run


def test_missing_actor_numbers_show_a_dash_and_the_actor_count_falls_back_to_the_live_rows():
    actor = {"role": "actor", "actor": 2, "host": "10.0.0.9", "connected_since": None}
    panel = nodes_html({**SYNCHRONOUS, "nodes": [RANK_ROW, actor], "learner": {}}, now=NOW)
    assert "1 actor(s)" in panel and "queue depth – · dropped batches –" in panel
    (row,) = table_rows(panel, "cluster-actors")
    assert row.count("<td>–</td>") == 3 and "<td>?</td>" in row  # steps/s, lag, batches; since unknown


def test_rank_rows_beside_actors_keep_their_table_and_no_live_actor_is_waiting():
    lost = {**ACTOR_ROWS[1]}
    table = {
        **ACTOR_LEARNER,
        "nodes": [RANK_ROW, lost],
        "learner": {"queue_depth": 0, "dropped_batches": 0, "actors": 0},
    }
    panel = nodes_html(table, now=NOW)
    assert "waiting for actors" in panel and "0 actor(s)" in panel
    assert len(table_rows(panel, "cluster-nodes")) == 1 and len(table_rows(panel, "cluster-actors")) == 1
    assert "finished" in nodes_html({**table, "finished": True}, now=NOW)
