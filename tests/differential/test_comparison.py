"""The comparison itself, without brokers: what a listed difference leaves out, and what not."""

from __future__ import annotations

from .comparison import differing, outlived, unexplained

KAFKA = {"error_code": "none", "configs": {"a.b": {"value": "1", "source": "STATIC"}, "c": {"value": "2", "source": "DEFAULT"}},
         "brokers": [{"id": 0}], "names": ["a.b", "c", "d"]}


def test_equal_results_do_not_differ():
    assert differing(KAFKA, KAFKA) == {}


def test_differences_are_named_by_path_with_absent_parts():
    replog = {"error_code": "none", "configs": {"a.b": {"value": "1", "source": "DEFAULT"}}, "brokers": [{"id": 1}], "names": ["a.b"]}
    assert differing(KAFKA, replog) == {
        "brokers/0/id": (0, 1),
        "configs/a.b/source": ("STATIC", "DEFAULT"),
        "configs/c/source": ("DEFAULT", "<absent>"),
        "configs/c/value": ("2", "<absent>"),
        "names": (["a.b", "c", "d"], ["a.b"]),
    }


def test_a_listing_leaves_out_exactly_its_part():
    replog = {**KAFKA, "error_code": "invalid_config", "configs": {**KAFKA["configs"], "a.b": {"value": "1", "source": "DEFAULT"}}}
    differences = differing(KAFKA, replog)
    assert unexplained(differences, {"configs/*/source": "why"}) == {"error_code": ("none", "invalid_config")}
    assert unexplained(differences, {"configs/c": "why"}) == differences, "another config's part is not listed"
    assert unexplained(differences, {"": "why"}) == {}


def test_a_listing_whose_difference_is_gone_is_named():
    assert outlived(differing(KAFKA, KAFKA), {"configs/*/source": "why"}) == ["configs/*/source"]
