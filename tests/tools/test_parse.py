import pytest

from boe.tools.parse import ReplyError, extract_json, read_generation, read_verdict


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"verdict": "confirm", "rationale": "r"}', id="plain"),
        pytest.param(
            'Sure! Here it is:\n```json\n{"verdict": "confirm", "rationale": "r"}\n```\nHope it helps', id="fence"
        ),
        pytest.param('The answer is {"verdict": "confirm", "rationale": "r"} and that is all {not json}', id="prose"),
        pytest.param('{"verdict": "confirm", "rationale": "r",}', id="trailing-comma"),
        pytest.param('  {"verdict": "Confirm.", "rationale": "r"}  trailing', id="case-and-trailing"),
    ],
)
def test_extract_json_finds_the_object(text):
    assert read_verdict(text) == ("confirm", "r")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param(None, id="none"),
        pytest.param("I think it is a CT scan.", id="prose-only"),
        pytest.param('{"answer": "ct"', id="truncated"),
        pytest.param("[1, 2, 3]", id="array"),
    ],
)
def test_extract_json_refuses_what_has_no_object(text):
    with pytest.raises(ReplyError):
        extract_json(text)


def test_verdict_outside_the_alphabet_is_an_error():
    with pytest.raises(ReplyError, match="not one of"):
        read_verdict('{"verdict": "definitely", "rationale": "x"}')
    with pytest.raises(ReplyError, match="no string 'verdict'"):
        read_verdict('{"rationale": "x"}')


def test_verdict_synonyms_map_into_the_alphabet():
    assert read_verdict('{"verdict": "REJECTED", "rationale": ""}')[0] == "reject"
    assert read_verdict('{"verdict": "cannot determine"}') == ("unresolved", "")


def test_generation_reads_answer_and_slots():
    answer, slots, present = read_generation(
        '```json\n{"answer": " MRI ", "modality": "MRI", "region": null, "view": "axial", '
        '"finding": "", "attribute": true}\n```'
    )
    assert answer == "MRI"
    assert slots == {"modality": "MRI", "region": None, "plane": "axial", "finding": None, "attribute": "yes"}
    assert present


def test_generation_without_slots_says_so():
    answer, slots, present = read_generation('{"answer": "left"}')
    assert answer == "left" and not present and set(slots.values()) == {None}


def test_generation_without_answer_is_an_error():
    with pytest.raises(ReplyError, match="no 'answer'"):
        read_generation('{"modality": "ct"}')
    with pytest.raises(ReplyError, match="must be a string"):
        read_generation('{"answer": {"nested": 1}}')
