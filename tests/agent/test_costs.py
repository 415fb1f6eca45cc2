"""Measured action costs: the definition, the measurement file, and reading figures from replies."""

import json

import pytest

from boe.agent.api import figure_paths
from boe.agent.costs import COST_FORMAT, CostMeter, load_costs_file, measured_costs
from boe.errors import ConfigError, InputError
from boe.tools.parse import read_figure

DESIGN = {"structured": 1.0, "vlm_factor": 4.0, "grounded_factor": 4.0, "whole_response": 8.0}


def test_measured_costs_split_the_design_total_by_measured_tokens():
    meter = CostMeter()
    for tokens in (300, 340):
        meter.add("vlm_factor", tokens, 0.5)
    meter.add("grounded_factor", 320, 0.9)
    meter.add("whole_response", 800, 0.6)
    meter.add("structured", 0, 0.0)
    costs = measured_costs(DESIGN, meter)
    # s = (3 + 3 + 7) / (320 + 320 + 800); c = 1 + s * mean tokens
    s = 13 / 1440
    assert costs == pytest.approx(
        {"structured": 1.0, "vlm_factor": 1 + s * 320, "grounded_factor": 1 + s * 320, "whole_response": 1 + s * 800},
        abs=1e-3,
    )
    assert sum(costs[k] for k in ("vlm_factor", "grounded_factor", "whole_response")) == pytest.approx(16, abs=1e-3)
    by_time = measured_costs(DESIGN, meter, "seconds")
    assert by_time["grounded_factor"] > by_time["whole_response"] > by_time["vlm_factor"]  # 0.9 > 0.6 > 0.5 s


def test_unmeasured_kinds_keep_their_design_cost():
    assert measured_costs(DESIGN, CostMeter()) == DESIGN
    meter = CostMeter()
    meter.add("whole_response", 500, 1.0)
    assert measured_costs(DESIGN, meter) == DESIGN  # one kind alone keeps its own design total
    meter.add("vlm_factor", 250, 1.0)
    costs = measured_costs(DESIGN, meter)
    assert costs["grounded_factor"] == 4.0 and costs["vlm_factor"] + costs["whole_response"] == pytest.approx(
        12, abs=1e-3
    )
    assert costs["whole_response"] - 1 == pytest.approx(2 * (costs["vlm_factor"] - 1), abs=1e-3)


def test_the_measurement_file_round_trips(tmp_path):
    meter = CostMeter()
    meter.add_actions(
        [
            {"kind": "vlm_factor", "tokens": 310, "seconds": 0.2},
            {"kind": "whole_response", "tokens": 700, "seconds": 0.3},
            {"kind": "grounded_factor", "tokens": None, "seconds": None},  # not run: no measurement
        ]
    )
    p = tmp_path / "costs.json"
    p.write_text(json.dumps(meter.to_json()))
    fixed, loaded, basis = load_costs_file(p)
    assert fixed is None and basis == "tokens" and loaded.table() == meter.table()
    assert measured_costs(DESIGN, loaded) == measured_costs(DESIGN, meter)
    p.write_text(json.dumps({"costs": {"structured": 1, "whole_response": 6}}))
    assert load_costs_file(p)[0] == {"structured": 1.0, "whole_response": 6.0}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("not json", "not JSON", id="not-json"),
        pytest.param(json.dumps({"format": "other"}), COST_FORMAT, id="unknown-format"),
        pytest.param(json.dumps({"costs": {"telepathy": 1}}), "action kinds", id="unknown-kind"),
        pytest.param(
            json.dumps({"format": COST_FORMAT, "kinds": {"vlm_factor": {"actions": 1}}}), "numbers", id="short-row"
        ),
        pytest.param(json.dumps({"format": COST_FORMAT, "basis": "dollars", "kinds": {}}), "basis", id="basis"),
    ],
)
def test_bad_cost_files(tmp_path, content, message):
    p = tmp_path / "c.json"
    p.write_text(content)
    with pytest.raises(ConfigError, match=message):
        load_costs_file(p)


def test_figure_paths():
    assert figure_paths("a.png") == [("0", "a.png")]
    assert figure_paths(["x/a.png"]) == [("0", "x/a.png")]
    assert figure_paths(["x/a.png", "y/a.png", "b.dcm"]) == [("a", "x/a.png"), ("a-2", "y/a.png"), ("b", "b.dcm")]
    assert figure_paths([("A", "a.png"), ("B", "b.png")]) == [("A", "a.png"), ("B", "b.png")]
    with pytest.raises(InputError, match="at most 6"):
        figure_paths([f"{i}.png" for i in range(7)])
    with pytest.raises(InputError, match="unique"):
        figure_paths([("A", "a.png"), ("A", "b.png")])


@pytest.mark.parametrize(
    ("reply", "figure"),
    [
        pytest.param('{"answer": "ct", "figure": "B"}', "B", id="id"),
        pytest.param('{"answer": "ct", "figure": "Figure b"}', "B", id="worded"),
        pytest.param('{"answer": "ct", "figure": 3}', "C", id="number"),
        pytest.param('{"answer": "ct", "figure": "D"}', None, id="unknown"),
        pytest.param('{"answer": "ct"}', None, id="missing"),
        pytest.param("not json", None, id="unreadable"),
    ],
)
def test_read_figure(reply, figure):
    assert read_figure(reply, ["A", "B", "C"]) == figure
