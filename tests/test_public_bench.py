import gzip
import json

from ctxkit.chat.pipeline import count_chat_tokens
from ctxkit.io.tokenizers import get_tokenizer
from evals import public_bench as pb

TOK = get_tokenizer("cl100k_base")


def _locomo(tmp_path):
    conv = {
        "speaker_a": "Ann", "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a dog."},
                      {"speaker": "Bo", "dia_id": "D1:2", "text": "Nice!",
                       "blip_caption": "a photo of a puppy"}],
        "session_2_date_time": "9:00 am on 9 May, 2023",
        "session_2": [{"speaker": "Bo", "dia_id": "D2:1", "text": "I moved to Oslo."}],
    }
    qa = [{"question": "What did Ann adopt?", "answer": "a dog", "evidence": ["D1:1"],
           "category": 4},
          {"question": "Who moved where?", "answer": "Bo, Oslo", "evidence": ["D1:1; D2:1"],
           "category": 1},
          {"question": "Trick?", "adversarial_answer": "x", "evidence": ["D1:2"],
           "category": 5},
          {"question": "Broken?", "answer": "?", "evidence": ["D"], "category": 2},
          {"question": "Missing?", "answer": "?", "evidence": ["D7:1"], "category": 2}]
    (tmp_path / "locomo_1.json").write_text(json.dumps({"conversation": conv, "qa": qa}))
    return pb.load_locomo(tmp_path)


def test_locomo_task_as_the_bench_readme_defines_it(tmp_path):
    [conv] = _locomo(tmp_path)
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "assistant"]
    assert conv.messages[0]["content"] == "[1:56 pm on 8 May, 2023] Ann: I adopted a dog."
    assert conv.messages[1]["content"] == "Bo: Nice! [shares a photo of a puppy]"
    assert conv.messages[2]["content"].startswith("[9:00 am on 9 May, 2023] Bo: ")
    # adversarial questions are left out; unresolvable evidence is listed, never silently lost
    assert [q.evidence for q in conv.questions] == [[0], [0, 2]]
    assert len(conv.skipped) == 2 and all("not in the conversation" in s for s in conv.skipped)
    q = conv.questions[1]
    msgs = pb.locomo_messages(conv, q)
    assert msgs[-1] == {"role": "user", "content": "Who moved where?"}
    assert pb.locomo_retained([0, 2, 3], q) and not pb.locomo_retained([0, 3], q)


def test_nq_answer_match_is_normalised():
    assert pb.normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert pb.nq_retained("built by the Gustave Eiffel company", ["Gustave Eiffel"])
    assert not pb.nq_retained("nothing here", ["Gustave Eiffel", ""])


def test_nq_and_kv_loaders(tmp_path):
    with gzip.open(tmp_path / "nq_passages.jsonl.gz", "wt") as fh:
        for i in range(3):
            fh.write(json.dumps({"id": i, "title": f"T{i}", "text": f"body {i}"}) + "\n")
    with gzip.open(tmp_path / "nq_cases.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"question": "q", "answers": ["body 2"], "passages": [2, 0],
                             "gold": 0}) + "\n")
    with gzip.open(tmp_path / "kv75.jsonl.gz", "wt") as fh:
        fh.write(json.dumps({"kv": [["k1", "v1"], ["k2", "v2"]], "key": "k2",
                             "value": "v2"}) + "\n")
    [case] = pb.load_nq(tmp_path)
    assert case.passages == ["T2\nbody 2", "T0\nbody 0"] and case.gold == 0
    [kv] = pb.load_kv(tmp_path)
    assert kv.text == 'JSON data:\n{\n "k1": "v1",\n "k2": "v2"\n}'
    assert kv.query.startswith('Key: "k2"') and pb.kv_retained(kv.text, "v2")
    assert pb.bench_dir(tmp_path.parent) is None


def test_baselines_fill_the_budget_and_never_exceed_it():
    units = [f"passage {i} about topic {i % 3} " * (1 + i % 4) for i in range(12)]
    for budget in (5, 20, 60):
        order = pb.first_ranking(units, "topic 2")
        text = pb.top_units(units, order, budget, TOK.count)
        assert TOK.count(text) <= budget
    msgs = [{"role": "user" if i % 2 else "assistant", "content": u} for i, u in
            enumerate(units)]
    for budget in (40, 90):
        kept = pb.top_messages(msgs, pb.recent_ranking(units[:-1], "x"), budget, TOK)
        assert len(msgs) - 1 in kept
        assert count_chat_tokens([msgs[i] for i in kept], tokenizer=TOK) <= budget
    if pb.bm25_available():
        assert pb.bm25_ranking(["cats purr", "dogs bark", "a cat"], "cats")[0] == 0


def test_cross_encoder_rows_only_with_a_local_reranker(tmp_path):
    from evals.public_compression import cross_encoder_scorer

    scorers = ["idf"]
    assert "none is available offline" in cross_encoder_scorer(None, scorers)
    assert "is not a directory" in cross_encoder_scorer(tmp_path / "missing", scorers)
    assert scorers == ["idf"]
    assert cross_encoder_scorer(tmp_path, scorers) is None
    assert scorers == ["idf", f"cross-encoder:{tmp_path}"]


def test_hotpot_task_as_the_bench_readme_defines_it(tmp_path):
    row = {"_id": "x", "question": "Which army did Romer join?", "answer": "Vistula Legion",
           "type": "bridge", "level": "hard",
           "supporting_facts": [["Jan Romer", 1], ["Vistula Legion", 0]],
           "context": [["Jan Romer", ["Jan Romer was a general.", " He joined the Legion."]],
                       ["Other", ["Nothing here."]],
                       ["Vistula Legion", [" The Legion was raised in 1807. "]]]}
    with gzip.open(tmp_path / "hotpot_dev.jsonl.gz", "wt") as fh:
        fh.write(json.dumps(row) + "\n")
    [case] = pb.load_hotpot(tmp_path)
    assert case.chunks == ["Jan Romer: Jan Romer was a general. He joined the Legion.",
                           "Other: Nothing here.", "Vistula Legion: The Legion was raised in 1807."]
    assert case.support == ["He joined the Legion.", "The Legion was raised in 1807."]
    assert case.gold == [0, 2] and case.kind == "bridge"
    # every supporting sentence must survive, compared after NQ normalisation
    assert pb.hotpot_retained("he joined the legion; the Legion was raised in 1807", case.support)
    assert not pb.hotpot_retained("He joined the Legion.", case.support)
