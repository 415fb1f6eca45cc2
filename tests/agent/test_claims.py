import json

import pytest

from boe.agent.claims import analyse_question, answer_of, build_graph, build_menu, canonicalise, grade, parse_candidate

COSTS = {"structured": 1.0, "vlm_factor": 4.0, "grounded_factor": 4.0, "whole_response": 8.0}
KINDS = ("structured", "vlm_factor", "grounded_factor", "whole_response")


def pool(q, replies):
    return [canonicalise(parse_candidate(i, r), q) for i, r in enumerate(replies)]


def reply(answer, **slots):
    return json.dumps(
        {"answer": answer, **{s: slots.get(s) for s in ("modality", "region", "plane", "finding", "attribute")}}
    )


def test_question_analysis_states_what_the_question_names():
    q = analyse_question("In what plane is this chest x-ray taken?")
    assert (q["type"], q["slot"], q["closed"]) == ("PLANE", "plane", False)
    assert q["context"] == {
        "modality": "xr",
        "modality:source": "question",
        "region": "chest",
        "region:source": "question",
    }
    q = analyse_question("Is this an MRI?", metadata={"modality": "ct"})
    assert q["slot"] == "modality" and q["closed"]
    assert q["context"]["modality"] == "ct" and q["context"]["modality:source"] == "dicom"


@pytest.mark.parametrize(
    ("question", "options", "text", "answer", "claim"),
    [
        pytest.param("what modality is this?", None, "MRI scan", "mr", ("modality", "mr"), id="open-slot"),
        pytest.param("what modality is this?", None, "a photograph", "photograph", None, id="unknown"),
        pytest.param("is there a mass?", None, "Yes.", "yes", ("attribute", "yes"), id="closed"),
        pytest.param(
            "where is the lesion?", None, "left upper lobe", "left upper lobe", ("attribute", "left"), id="free-attr"
        ),
        pytest.param("where is the lesion?", None, "Right", "right", ("attribute", "right"), id="exact-attr"),
        pytest.param("what modality?", {"A": "CT", "B": "MRI"}, "B", "B", ("modality", "mr"), id="mcq-letter"),
        pytest.param("what modality?", {"A": "CT", "B": "MRI"}, "(A) CT", "A", ("modality", "ct"), id="mcq-paren"),
        pytest.param(
            "what modality?", {"A": "CT", "B": "MRI"}, "magnetic resonance", "B", ("modality", "mr"), id="mcq-text"
        ),
    ],
)
def test_answers_fill_the_asked_slot(question, options, text, answer, claim):
    q = analyse_question(question, options)
    got, canon = answer_of(text, q)
    assert got == answer
    assert (None if canon is None else (canon.slot, canon.value)) == claim


def test_invalid_replies_are_kept_as_invalid_candidates():
    q = analyse_question("what modality is this?")
    cands = pool(q, [reply("CT", modality="CT"), "I think CT", None, '{"modality": "ct"}'])
    assert [c["valid"] for c in cands] == [True, False, False, False]
    assert cands[1]["raw_text"] == "I think CT" and "no JSON object" in cands[1]["error"]
    assert cands[3]["error"] == "the reply has no 'answer'"
    assert all(c["answer"] is None and c["claims"] == {} for c in cands[1:])


def test_graph_signs_rivals_and_menu_covers_every_claim():
    q = analyse_question("what modality is this?")
    cands = pool(
        q,
        [
            reply("CT", modality="CT", finding="mass", attribute="left"),
            reply("MRI", modality="MRI", finding="mass", attribute="left"),
            reply("CT scan", modality="CT", finding="tumor", attribute="right"),
            "garbage",
        ],
    )
    claims, edges = build_graph(cands)
    ids = [c["id"] for c in claims]
    assert ids == ["modality=ct", "modality=mr", "finding=mass", "attribute=left", "attribute=right"]
    sign = {(e["candidate"], e["claim"]): e["sign"] for e in edges}
    assert sign[(0, "modality=ct")] == 1 and sign[(1, "modality=ct")] == -1 and sign[(1, "modality=mr")] == 1
    assert sign[(2, "attribute=left")] == -1 and sign[(0, "attribute=right")] == -1
    assert all(e["candidate"] != 3 for e in edges)  # invalid candidates carry no edges
    assert {c["id"]: c["location"] for c in claims}["finding=mass"] == ["left"]  # 2 of 3 supporters say left
    menu = build_menu(claims, cands, COSTS, KINDS, q)
    kinds = [a["kind"] for a in menu]
    assert kinds == ["structured"] * 2 + ["vlm_factor"] * 5 + ["grounded_factor"] * 5 + ["whole_response"] * 3
    groups = {a["id"]: a["group"] for a in menu}
    assert groups["s:modality=ct"] == "structured/answer:modality" and groups["v:modality=mr"] == "vlm/answer:modality"
    assert groups["v:finding=mass"] == "vlm/finding" and groups["g:attribute=left"] == "grounded/attribute"
    assert groups["w:1"] == "whole"
    assert [a["candidate"] for a in menu if a["kind"] == "whole_response"] == [0, 1, 2]
    only_vlm = build_menu(claims, cands, {**COSTS, "vlm_factor": 2.5}, ("vlm_factor",), q)
    assert {a["kind"] for a in only_vlm} == {"vlm_factor"} and {a["cost"] for a in only_vlm} == {2.5}


def test_grading_uses_the_same_canonicalisation():
    q = analyse_question("what modality is this?")
    assert grade("mr", "MRI", q) == 1.0 and grade("ct", "MRI", q) == 0.0 and grade(None, "MRI", q) == 0.0
    assert grade("mr", None, q) is None


def test_yes_no_answers_are_grouped_by_attribute_family():
    q = analyse_question("Is there a mass in the left lung?")
    cands = pool(q, [reply("yes", attribute="yes"), reply("No", attribute="left")])
    claims, _ = build_graph(cands)
    menu = build_menu(claims, cands, COSTS, ("vlm_factor",), q)
    assert {a["id"]: a["group"] for a in menu} == {
        "v:attribute=yes": "vlm/answer:yesno",
        "v:attribute=no": "vlm/answer:yesno",
    }


def test_claims_of_a_several_figure_question_carry_their_figure():
    from boe.kinds import figure_context

    q = analyse_question(
        "What imaging modality is shown?",
        figure_metadata={"A": ({"modality": "ct"}, {"modality": "Modality"}), "B": ({}, {})},
    )
    assert "modality" not in q["context"]  # one figure's header says nothing about another's
    assert figure_context(q, "A")["modality"] == "ct" and figure_context(q, "A")["modality:tag"] == "Modality"
    assert "modality" not in figure_context(q, "B") and "modality" not in figure_context(q, None)
    cands = pool(q, [reply("ct", modality="ct"), reply("mr", modality="mr"), reply("ct", modality="ct")])
    for c, fig in zip(cands, ("A", "A", "B"), strict=True):
        c["figure"] = fig
    claims, edges = build_graph(cands, "A", multi=True)
    assert {(c["id"], c["figure"], c["support"]) for c in claims} == {
        ("modality=ct@A", "A", 1),
        ("modality=mr@A", "A", 1),
        ("modality=ct@B", "B", 1),
    }
    signs = {(e["candidate"], e["claim"]): e["sign"] for e in edges}
    # rivals only on the same figure: candidate 2 (figure B) neither supports nor opposes the A claims
    assert signs == {
        (0, "modality=ct@A"): 1,
        (1, "modality=ct@A"): -1,
        (1, "modality=mr@A"): 1,
        (0, "modality=mr@A"): -1,
        (2, "modality=ct@B"): 1,
    }
    unbound = [{**cands[0], "figure": None}]
    (claim,), _ = build_graph(unbound, "A", multi=True)
    assert claim["id"] == "modality=ct" and claim["figure"] is None
    menu = build_menu([claim], unbound, COSTS, KINDS, q, design={**COSTS, "vlm_factor": 5.0})
    assert [a["kind"] for a in menu] == ["structured", "vlm_factor", "whole_response"]  # nothing to ground on
    assert menu[1]["cost"] == 4.0 and menu[1]["design_cost"] == 5.0


def test_a_check_the_record_settles_is_in_the_record_channel_whatever_the_dataset():
    """DICOM tags (or the question text) stating a slot put its structured checks in the `record` channel."""
    q = analyse_question("what modality is this?", metadata={"modality": "ct"}, tags={"modality": "Modality"})
    cands = pool(q, [reply("CT", modality="CT", region="chest"), reply("MRI", modality="MRI", region="head")])
    claims, _ = build_graph(cands)
    groups = {a["id"]: a["group"] for a in build_menu(claims, cands, COSTS, KINDS, q)}
    assert groups["s:modality=ct"] == "record/answer:modality" and groups["s:modality=mr"] == "record/answer:modality"
    assert groups["s:region=chest"] == "structured/region"  # the header is silent on the region
    plain = analyse_question("what modality is this?")
    groups = {a["id"]: a["group"] for a in build_menu(claims, cands, COSTS, KINDS, plain)}
    assert groups["s:modality=ct"] == "structured/answer:modality"


def test_one_answer_check_per_distinct_short_answer_shown_by_its_first_candidate():
    q = analyse_question("what modality is this?")
    cands = pool(
        q,
        [
            "garbage",
            reply("MRI", modality="MRI"),
            reply("CT", modality="CT"),
            reply("CT scan", modality="CT"),
            reply("mr", modality="MRI"),
            reply("CT", modality="CT"),
        ],
    )
    claims, _ = build_graph(cands)
    costs = {**COSTS, "answer_response": 6.0}
    menu = build_menu(claims, cands, costs, (*KINDS, "answer_response"), q, design={**costs, "answer_response": 8.0})
    answers = [a for a in menu if a["kind"] == "answer_response"]
    assert menu[-len(answers) :] == answers  # last in the tie-breaking order
    assert [(a["id"], a["candidate"], a["answer"], a["share"]) for a in answers] == [
        ("a:1", 1, "mr", 2),
        ("a:2", 2, "ct", 3),
    ]
    assert all(a["claim"] is None and a["group"] == "answer" for a in answers)
    # every valid answer is short and judged as an answer: no candidate keeps a whole-response check of its own
    assert not [a for a in menu if a["kind"] == "whole_response"]
    assert {(a["cost"], a["design_cost"]) for a in answers} == {(6.0, 8.0)}
    assert not [a for a in build_menu(claims, cands, costs, KINDS, q) if a["kind"] == "answer_response"]


def test_long_free_text_answers_get_no_answer_check():
    q = analyse_question("what is the most likely diagnosis here?")
    long = "an appearance consistent with a benign process of uncertain origin"
    cands = pool(q, [reply(long), reply(long), reply("nodule", finding="nodule")])
    claims, _ = build_graph(cands)
    costs = {**COSTS, "answer_response": 8.0}
    answers = [a for a in build_menu(claims, cands, costs, ("answer_response",), q) if a["kind"] == "answer_response"]
    assert [(a["candidate"], a["answer"]) for a in answers] == [(2, "nodule")]
    both = build_menu(claims, cands, costs, ("whole_response", "answer_response"), q)
    assert [(a["kind"], a["candidate"]) for a in both] == [
        ("whole_response", 0),
        ("whole_response", 1),
        ("answer_response", 2),
    ]
