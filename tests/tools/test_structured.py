import asyncio

import numpy as np
import pytest

from boe.kinds import make_tool
from boe.tools.images import ImageRef, LoadedImage
from boe.tools.protocol import ToolRequest

IMG = LoadedImage(ImageRef("x.png", "0" * 16, "0", "image/png", 4, 4), np.zeros((4, 4), np.uint8), "data:,")


def check(slot, value, context=None, options=None):
    tool = make_tool("structured")
    req = ToolRequest(
        action={"id": f"s:{slot}={value}"},
        question="q",
        image=IMG,
        options=options,
        claim={"slot": slot, "value": value},
        context=context or {},
    )
    return asyncio.run(tool.run(req))


@pytest.mark.parametrize(
    ("slot", "value", "context", "options", "outcome"),
    [
        pytest.param("modality", "photograph", None, None, "reject", id="outside-vocabulary"),
        pytest.param("modality", "ct", None, None, "unresolved", id="admitted-nothing-stated"),
        pytest.param("modality", "ct", {"modality": "ct"}, None, "confirm", id="stated-same"),
        pytest.param(
            "modality", "mr", {"modality": "ct", "modality:source": "dicom"}, None, "reject", id="stated-other"
        ),
        pytest.param("plane", "axial", {"modality": "xr"}, None, "reject", id="plane-impossible-for-modality"),
        pytest.param("plane", "pa", {"modality": "xr"}, None, "unresolved", id="plane-possible"),
        pytest.param("finding", "whatever", None, None, "unresolved", id="open-slot"),
        pytest.param("option", "E", None, {"A": "CT", "B": "MRI"}, "reject", id="option-missing"),
        pytest.param("option", "B", None, {"A": "CT", "B": "MRI"}, "unresolved", id="option-exists"),
        pytest.param("option", "B", {"modality": "mr"}, {"A": "CT", "B": "MRI"}, "confirm", id="option-stated"),
        pytest.param("option", "A", {"modality": "mr"}, {"A": "CT", "B": "MRI"}, "reject", id="option-contradicted"),
    ],
)
def test_structured_check(slot, value, context, options, outcome):
    res = check(slot, value, context, options)
    assert res.outcome == outcome and res.rationale and res.error is None and res.calls == []


def test_unknown_kind_is_a_config_error():
    from boe.errors import ConfigError

    with pytest.raises(ConfigError, match="no evidence tool"):
        make_tool("telepathy")
