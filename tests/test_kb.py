"""The knowledge base: real size, and a loader that rejects corrupted files with a message naming the row."""

import shutil

import pytest

from lib.envs.polyguard.kb import DATA_DIR, KnowledgeBaseError, load_kb


def test_knowledge_base_meets_its_size_promises():
    kb = load_kb()
    assert len(kb.drugs) >= 60
    assert len({d.drug_class for d in kb.drugs.values()}) >= 15
    assert len(kb.interactions) >= 150
    severities = {i.severity for i in kb.interactions.values()}
    assert severities == {"minor", "moderate", "major", "contraindicated"}
    assert len(kb.renal) >= 15 and {r.action for r in kb.renal.values()} == {"reduce", "avoid"}
    assert len(kb.contraindications) >= 15
    assert all(len(kb.alternatives.get(d, ())) >= 1 for d in kb.drugs)
    reserved = [i for i in kb.interactions.values() if i.reserved]
    assert len(reserved) >= 10 and all(i.is_major for i in reserved)
    assert (DATA_DIR.parent / "DATA.md").read_text().lower().count("not clinical advice") >= 1


@pytest.fixture
def kb_copy(tmp_path):
    target = tmp_path / "data"
    shutil.copytree(DATA_DIR, target)
    return target


def _append(path, line):
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def _line_count(path):
    return len(path.read_text(encoding="utf-8").splitlines())


def test_interaction_naming_an_unknown_drug_names_the_row(kb_copy):
    path = kb_copy / "interactions.csv"
    _append(path, "warfarin,notadrug,major,mechanism,management,0")
    with pytest.raises(
        KnowledgeBaseError, match=rf"interactions.csv line {_line_count(path)}: drug_b 'notadrug' is not in drugs.csv"
    ):
        load_kb(kb_copy)


@pytest.mark.parametrize(
    "file, line, message",
    [
        ("interactions.csv", "amoxicillin,levothyroxine,terrible,m,x,0", "severity 'terrible'"),
        ("interactions.csv", "warfarin,warfarin,major,m,x,0", "cannot interact with itself"),
        ("interactions.csv", "amoxicillin,levothyroxine,major,m", "expected 6 fields"),
        ("renal_rules.csv", "warfarin,abc,reduce,note", "egfr_below 'abc'"),
        ("drugs.csv", "newdrug,statin,not_a_condition", "indication 'not_a_condition'"),
        ("alternatives.csv", "warfarin,,note", "field 'alternative' is empty"),
    ],
)
def test_corrupted_rows_are_rejected_with_their_line(kb_copy, file, line, message):
    path = kb_copy / file
    _append(path, line)
    with pytest.raises(KnowledgeBaseError, match=rf"{file} line {_line_count(path)}: .*{message}"):
        load_kb(kb_copy)


def test_bad_header_and_missing_file(kb_copy):
    path = kb_copy / "drugs.csv"
    text = path.read_text().splitlines()
    path.write_text("\n".join(["name,class,indication"] + text[1:]) + "\n")
    with pytest.raises(KnowledgeBaseError, match="header"):
        load_kb(kb_copy)
    (kb_copy / "renal_rules.csv").unlink()
    (kb_copy / "drugs.csv").write_text("\n".join(text) + "\n")
    with pytest.raises(KnowledgeBaseError, match="renal_rules.csv: file is missing"):
        load_kb(kb_copy)
