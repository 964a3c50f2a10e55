"""Prefix packing (lib/training/packing.py): a batch's rows as one tree of tokens, each shared beginning computed
once, with the loss and the gradients of the rows themselves."""

import json

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lib.training.packing import IGNORE, EpisodeBatches, additive_mask, episode_key, pack, trunk_attention_on


def _model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=40,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config).float()


def _row(prompt, answer):
    return {"input_ids": prompt + answer, "labels": [IGNORE] * len(prompt) + answer}


# two rows of one beginning, a third with the second's very prompt and another answer, and one of its own
ROWS = [
    _row([1, 5, 6, 7, 8, 9, 10, 11], [20, 21, 2]),
    _row([1, 5, 6, 7, 8, 12, 13], [22, 2]),
    _row([1, 5, 6, 7, 8, 12, 13], [23, 24, 2]),
    _row([1, 30, 31], [25, 2]),
]


def _row_losses(model, rows):
    """Each row's summed answer-token NLL, from its own ordinary forward pass."""
    total = 0.0
    for row in rows:
        ids, labels = torch.tensor([row["input_ids"]]), torch.tensor(row["labels"])
        logprobs = model(input_ids=ids).logits[0, :-1].log_softmax(-1)
        targets = labels[1:]
        keep = targets != IGNORE
        total = total - logprobs[keep].gather(1, targets[keep][:, None]).sum()
    return total


def _packed_loss(model, batch, trunk: bool = False):
    mask = additive_mask(batch["packed_mask"], torch.float32)
    inputs = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"], "attention_mask": mask}
    if trunk:  # the trainer's path (PrefixPackedSFTTrainer.compute_loss): the trunk's causal block computed apart
        with trunk_attention_on(model) as split:
            assert split
            logits = model(**inputs, trunk_length=int(batch["trunk_length"])).logits
    else:
        logits = model(**inputs).logits
    logprobs, targets = logits[0].log_softmax(-1), batch["shift_labels"][0]
    keep = targets != IGNORE
    return -logprobs[keep].gather(1, targets[keep][:, None]).sum()


def test_the_packed_loss_and_gradients_are_the_rows_own():
    model = _model()
    expected = _row_losses(model, ROWS)
    expected.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    batch = pack(ROWS, pad_id=0, multiple=8)
    got = _packed_loss(model, batch)
    got.backward()
    assert torch.allclose(got, expected, atol=1e-4), (float(got), float(expected))
    for name, p in model.named_parameters():
        assert torch.allclose(p.grad, grads[name], atol=1e-5), name


@pytest.mark.parametrize("multiple", [None, 8])
def test_trunk_attention_gives_the_rows_own_loss_and_gradients(multiple):
    model = _model()
    expected = _row_losses(model, ROWS)
    expected.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    got = _packed_loss(model, pack(ROWS, pad_id=0, multiple=multiple), trunk=True)
    got.backward()
    assert torch.allclose(got, expected, atol=1e-4), (float(got), float(expected))
    for name, p in model.named_parameters():
        assert torch.allclose(p.grad, grads[name], atol=1e-5), name


def test_the_longest_row_is_laid_out_first_and_its_block_of_the_mask_is_causal():
    batch = pack(ROWS, pad_id=0, multiple=32)
    trunk, allowed = int(batch["trunk_length"]), batch["packed_mask"][0, 0]
    assert trunk == len(ROWS[0]["input_ids"])  # row 0 is the longest chain: its 11 tokens, in its order
    assert batch["input_ids"][0, :trunk].tolist() == ROWS[0]["input_ids"]
    assert batch["position_ids"][0, :trunk].tolist() == list(range(trunk))
    assert torch.equal(allowed[:trunk, :trunk], torch.ones(trunk, trunk, dtype=torch.bool).tril())
    assert not allowed[:trunk, trunk:].any()  # no trunk token sees a branch
    # every other token sees only tokens laid out before it, and itself
    assert not allowed.triu(diagonal=1).any()


def test_trunk_attention_without_a_trunk_is_plain_sdpa():
    model = _model()
    ids = torch.tensor([[1, 5, 6, 7, 8, 9]])
    expected = model(input_ids=ids).logits
    with trunk_attention_on(model) as split:
        assert split and model.config._attn_implementation != "sdpa"
        got = model(input_ids=ids).logits
    assert model.config._attn_implementation == "sdpa"  # put back
    assert torch.allclose(got, expected, atol=1e-6)


def test_rows_share_their_beginning_but_each_keeps_the_token_that_predicts_its_answer():
    batch = pack(ROWS, pad_id=0)
    # shared: [1,5,6,7,8] then [9,10] (row 0's prompt but its last) and [12] (rows 1 and 2's), [30] (row 3's);
    # own: row 0 [11,20,21,2], row 1 [13,22,2], row 2 [13,23,24,2], row 3 [31,25,2]
    assert int(batch["packed_tokens"]) == 5 + 2 + 1 + 1 + 4 + 3 + 4 + 3
    assert int((batch["shift_labels"] != IGNORE).sum()) == sum(
        sum(label != IGNORE for label in row["labels"]) for row in ROWS
    )
    assert (batch["labels"] == IGNORE).all()


def test_padding_reaches_the_multiple_and_sees_only_itself():
    batch = pack(ROWS, pad_id=0, multiple=64)
    width, real = batch["input_ids"].shape[1], int(batch["packed_tokens"])
    assert width == 64 and real < 64
    pads = batch["packed_mask"][0, 0, real:]
    assert (pads.sum(-1) == 1).all() and (batch["shift_labels"][0, real:] == IGNORE).all()
    assert (batch["input_ids"][0, real:] == 0).all()


def test_a_row_with_no_answer_token_is_refused():
    with pytest.raises(ValueError, match="no answer token"):
        pack([{"input_ids": [1, 2, 3], "labels": [IGNORE] * 3}], pad_id=0)


def test_each_batch_is_one_episode_s_rows_and_every_row_is_drawn_once():
    def prompt(first, *later):
        messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": first}]
        for turn in later:
            messages += [{"role": "assistant", "content": "a"}, {"role": "user", "content": turn}]
        return messages

    prompts = [prompt("A"), prompt("B"), prompt("A", "x"), prompt("C"), prompt("B", "y"), prompt("A", "x", "z")]
    keys = [episode_key(p) for p in prompts]
    batches = list(EpisodeBatches(keys, seed=0))
    assert sorted(map(sorted, batches)) == [[0, 2, 5], [1, 4], [3]]
    assert list(EpisodeBatches(keys, seed=0)) == batches
    assert any(list(EpisodeBatches(keys, seed=s)) != batches for s in range(1, 6))


@pytest.mark.slow
def test_sft_under_turns_conversation_trains_packed_rows_on_fewer_tokens(tmp_path):
    """The sft stage under `env_args.turns: conversation`: each row's prompt is its episode so far, the batches are
    packed by prefix, and it trains on far fewer tokens than its rows hold, with a falling loss."""
    from lib.candidates import prompt_ids
    from lib.models import load_model
    from lib.training.sft import run_sft
    from tests import micro

    overrides = {**micro.MICRO, "env_args": {"turns": "conversation"}, "sft.logging_steps": 1, "sft.max_length": 4096}
    config, run, rows = micro.corpus_run("cpu-smoke", overrides, tmp_path)
    assert any(len(r["prompt"]) > 2 for r in rows)  # conversations: answers and turns after the first state
    sft = run_sft(config, run)["metrics"]
    assert sft["batching"] == "prefix"
    _, tokenizer, _ = load_model(run.read_stage("sft")["outputs"]["model"], config.model)
    held = sum(len(prompt_ids(tokenizer, r["prompt"])) + 8 for r in rows)  # each row alone, answers not counted
    assert 0 < sft["train_tokens"] < 0.6 * held, (sft["train_tokens"], held)
    assert sft["loss_last"] < sft["loss_first"]
    logged = [json.loads(line) for line in (run.stage_dir("sft") / "train_log.jsonl").read_text().splitlines()]
    shares = [entry["trunk_share"] for entry in logged if "trunk_share" in entry]
    assert shares and all(0 < share <= 1 for share in shares)  # the trunk's causal block computed apart


@pytest.mark.slow
def test_sft_refuses_rows_longer_than_its_max_length_instead_of_cutting_them(tmp_path):
    from lib.training.harness import PromptTooLongError
    from lib.training.sft import run_sft
    from tests import micro

    config, run, _ = micro.corpus_run("cpu-smoke", {**micro.MICRO, "sft.max_length": 64}, tmp_path)
    with pytest.raises(PromptTooLongError, match="exceed sft.max_length less the longest answer"):
        run_sft(config, run)
    assert not (run.dir / "sft" / "model").exists()


def test_sft_pads_smollm2_batches_to_a_multiple_of_64_and_leaves_the_tiny_model_s_alone(tmp_path):
    from lib.config import load_config
    from lib.runs import Run
    from lib.training.harness import sft_args, sft_batching

    for profile, multiple in (("cpu-smollm2-polyguard", 64), ("cpu-smoke", None)):
        config = load_config(profile)
        args = sft_args(config, Run(tmp_path / profile, config), tmp_path / profile)
        assert args.pad_to_multiple_of == multiple
    assert sft_batching(load_config("cpu-smollm2-polyguard")) == "prefix"
    assert sft_batching(load_config("cpu-smollm2-polyguard", {"env_args": {"turns": "state"}})) == "length"
    assert sft_batching(load_config("cpu-smoke", {"env_args": {"turns": "conversation"}})) == "prefix"
    assert sft_batching(load_config("cpu-smoke", {"env_args": {"turns": "updates"}})) == "prefix"
