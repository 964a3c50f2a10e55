"""Train what is scored (`sft.candidate_loss`): beside SFT's token loss, the cross-entropy of the teacher's answer
among the offered candidates, under the same candidate-scoring policy that acts (lib/candidates.py: the softmax over
the candidates of each complete answer's log-likelihood).

The token loss teaches the answer's tokens one by one and never says which other offered answers were wrong; a tiny
model can lower it by learning the frequent answers (measured on two environments: docs/RESULTS.md). This loss is the
policy's own cross-entropy at the teacher's states, so a gradient step on it moves the teacher's candidate up and the
others down, by exactly the quantity evaluation ranks them by.

A corpus row carries its seed, split and action history, so its candidates are rebuilt here by replaying the
history in the environment (`Environment.restore`), not stored twice. Rows whose label is no offered candidate (free
text) add nothing. It runs inside TRL's SFTTrainer: a subclass adds the loss in `compute_loss`, and the row's index
travels through the dataset and the collator as one extra column.
"""

from __future__ import annotations

import torch

from ..candidates import answer_logprobs, answers

ROW = "row"  # the extra dataset column: the row's index in the corpus


def candidate_table(spec, rows: list[dict]) -> list[tuple[list[dict], list[str], int] | None]:
    """Per corpus row: (its prompt, the offered answers at its state, the index of its label among them), or None
    where the label is not one of them."""
    env = spec.make_env()
    table = []
    for row in rows:
        offered = answers(env.restore(row["seed"], row["split"], row["history"]))
        label = row["completion"][-1]["content"].strip()
        table.append((row["prompt"], offered, offered.index(label)) if label in offered else None)
    return table


def candidate_cross_entropy(model, tokenizer, entries: list[tuple[list[dict], list[str], int]]) -> torch.Tensor:
    """Mean over `entries` of -log pi(label | state), pi the softmax over the offered answers' log-likelihoods."""
    scores = answer_logprobs(model, tokenizer, [e[0] for e in entries], [e[1] for e in entries])
    losses = [-torch.log_softmax(s, dim=0)[e[2]] for s, e in zip(scores, entries)]
    return torch.stack(losses).mean()


def with_candidate_loss(trainer_class, table: list, weight: float):
    """`trainer_class` (TRL's SFTTrainer) whose loss adds `weight` x the candidate cross-entropy of the batch's
    rows; the dataset must carry the `ROW` column. The term's mean is logged as `candidate_ce`."""

    class CandidateLossTrainer(trainer_class):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            collate = self.data_collator

            def with_rows(examples):
                return {**collate(examples), ROW: torch.tensor([e[ROW] for e in examples])}

            self.data_collator = with_rows

        def _set_signature_columns_if_needed(self):
            super()._set_signature_columns_if_needed()
            if ROW not in self._signature_columns:  # kept by Trainer's column pruning
                self._signature_columns = [*self._signature_columns, ROW]

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            rows = inputs.pop(ROW).tolist()
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            entries = [table[i] for i in rows if table[i] is not None]
            if not entries:
                return result
            term = candidate_cross_entropy(model, self.processing_class, entries).to(torch.float32)
            self._metrics["train" if model.training else "eval"]["candidate_ce"].append(term.item())
            if return_outputs:
                return result[0] + weight * term, result[1]
            return result + weight * term

    return CandidateLossTrainer
