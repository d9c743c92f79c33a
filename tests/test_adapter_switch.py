"""A chat that switches LoRA adapters per turn keeps its cached KV prefix across the task turns: a task turn is
answered alone (its task's prompt, none of the conversation), so it neither reads the conversation's cache nor
replaces it, and the everyday turn after it prefills its new tokens only, with the same tokens and features as a
full prefill. A cache made by one set of weights never serves a turn made with another (``PrefixCache.weights``). A
follow-up that leaned on a task exchange reads it, and the turn after leaves it out again: that turn reuses the part
of the cache both readings start with.

The model: the tiny llama with 4 blocks, two adapter sets (mlx-lm's format, random non-zero ``lora_b``) on its last
2 blocks, each answering its own task's turns."""

from __future__ import annotations

import json
from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest

from tests.tiny_lm import build_tiny_lm

TASKS = {"spell": "Spell the word:", "count": "Count the letters in:"}
EVERYDAY = ["Tell me about Paris.", "And about Rome?", "Which is older?"]
TURN = dict(max_tokens=6, enable_p_true=False)


def _adapter_folder(folder, seed: int):
    """One adapter set as mlx-lm writes it, for the last 2 of the tiny model's 4 blocks."""
    from mlx_sdm.lm.adapters import ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, LoraSettings, add_lora_layers, \
        adapter_weights

    model, _ = build_tiny_lm(seed=0, num_layers=4)
    settings = LoraSettings(rank=4, num_layers=2)
    add_lora_layers(model, settings)
    mx.random.seed(seed)
    weights = {name: mx.random.normal(value.shape) * 0.05 for name, value in adapter_weights(model).items()}
    folder.mkdir(parents=True)
    mx.save_safetensors(str(folder / ADAPTER_WEIGHTS_FILE), weights)
    (folder / ADAPTER_CONFIG_FILE).write_text(json.dumps(settings.adapter_config()))
    return folder


@pytest.fixture(scope="module")
def components(tmp_path_factory):
    from mlx_sdm.lm.adapters import AdapterSource, attach_adapters
    from mlx_sdm.lm.loading import LoadedModel, model_fingerprint
    from mlx_sdm.network.coverage import TaskInstruction
    from mlx_sdm.turn.values import TurnComponents

    root = tmp_path_factory.mktemp("switch")
    model, tokenizer = build_tiny_lm(seed=0, num_layers=4)
    lm = LoadedModel(model=model, tokenizer=tokenizer, name="tiny-llama-4", max_context=2048,
                     fingerprint=model_fingerprint(model, "llama"), source="tests/tiny_lm.py")
    sources = [AdapterSource(name, _adapter_folder(root / name, seed), (instruction,))
               for seed, (name, instruction) in enumerate(TASKS.items(), start=1)]
    lm.adapters = attach_adapters(model, sources)
    tasks = tuple(TaskInstruction(instruction, "Answer the task.", name) for name, instruction in TASKS.items())
    return TurnComponents(lm=lm, adapted_tasks=tasks)


class Chat:
    """One conversation's turns, the cached prefix kept between them as the turn service keeps it."""

    def __init__(self, components):
        from mlx_sdm.turn.pipeline import TurnPipeline

        self.pipeline, self.prefix, self.messages = TurnPipeline(components), None, []

    def ask(self, question: str):
        from mlx_sdm.turn.values import TurnOptions, TurnRequest

        self.messages.append({"role": "user", "content": question})
        prefix, self.prefix = self.prefix, None
        outcome = self.pipeline.run(TurnRequest(list(self.messages), TurnOptions(**TURN)), prefix=prefix,
                                    keep_prefix=self._keep)
        self.messages.append({"role": "assistant", "content": outcome.answer.text})
        return outcome

    def _keep(self, kept) -> None:
        self.prefix = kept


def _fresh(components, messages):
    """The same turn with no cached prefix: the whole conversation prefilled."""
    from mlx_sdm.turn.pipeline import TurnPipeline
    from mlx_sdm.turn.values import TurnOptions, TurnRequest

    return TurnPipeline(components).run(TurnRequest(list(messages), TurnOptions(**TURN)))


@pytest.mark.parametrize("between", [["spell"], ["spell", "count"], ["count", "spell", "count"]])
def test_an_everyday_turn_after_task_turns_reuses_the_conversations_cache(components, between):
    chat = Chat(components)
    chat.ask(EVERYDAY[0])
    made = chat.prefix
    assert made is not None and made.weights == ""  # the base model made it
    for name in between:  # a task turn, or a switch between two tasks' adapters
        task = chat.ask(f"{TASKS[name]} apple")
        assert task.answer.reused_tokens == 0 and chat.prefix is made  # handed on untouched
    assert components.lm.adapters.active is False
    after = chat.ask(EVERYDAY[1])
    assert after.answer.reused_tokens == len(made.ids)  # the conversation so far came from the cache
    full = _fresh(components, chat.messages[:-1])
    assert full.answer.reused_tokens == 0 and after.answer.token_ids == full.answer.token_ids
    np.testing.assert_allclose(after.answer.features, full.answer.features, atol=1e-5)


def test_a_task_turn_answers_with_its_own_adapters(components):
    """The sets are not the base model: a task turn's logits differ, and each set's from the other's."""
    from mlx_sdm.lm.prompt import render_prompt

    lm = components.lm
    ids = mx.array([render_prompt(lm.tokenizer, [{"role": "user", "content": f"{TASKS['spell']} apple"}])])
    base = lm.model(ids)
    with lm.adapters.use("spell"):
        spell = lm.model(ids)
    with lm.adapters.use("count"):
        count = lm.model(ids)
    assert float(mx.abs(spell - base).max()) > 1e-3 and float(mx.abs(spell - count).max()) > 1e-3


def test_the_everyday_turn_after_a_task_turn_feeds_only_its_new_tokens(components, monkeypatch):
    """The switch back does not run the model over the cached conversation: embed_tokens reads the new tokens and
    the answer's, never the conversation's again."""
    chat = Chat(components)
    chat.ask(EVERYDAY[0])
    chat.ask(f"{TASKS['spell']} pear")
    embed = components.lm.model.model.embed_tokens
    fed: list[int] = []
    real = type(embed).__call__

    def counting(self, x):
        fed.append(int(x.shape[-1]))
        return real(self, x)

    monkeypatch.setattr(type(embed), "__call__", counting)
    after = chat.ask(EVERYDAY[1])
    new = after.answer.prompt_tokens - after.answer.reused_tokens  # the task exchange (not JSON here) and the question
    assert after.answer.reused_tokens > 0 and max(fed) <= new
    # the new tokens (mlx-lm's prefill, then its first step), then one position per generated token: no cached one
    assert new <= sum(fed) <= new + TURN["max_tokens"] < after.answer.prompt_tokens


def test_a_cache_serves_only_the_weights_that_made_it(components):
    """A prefix made with one set's adapters on is not read by a turn with another set or none: that turn
    prefills the whole prompt, and its tokens are the full prefill's."""
    from mlx_sdm.turn.answer import generate_answer

    lm = components.lm
    messages = [{"role": "user", "content": EVERYDAY[0]}]
    first = generate_answer(lm, messages, max_tokens=4, keep_cache=True)
    n = len(first.prefix.ids) if first.prefix is not None else 0
    assert first.prefix is not None and first.prefix.weights == "" and first.prefix.shared_with(
        first.prefix.ids + [1], "") == n
    follow = messages + [{"role": "assistant", "content": first.text}, {"role": "user", "content": EVERYDAY[1]}]
    with lm.adapters.use("spell"):
        alien = replace(first.prefix, weights=lm.weights_tag)  # as a turn with the spell set on would tag it
    assert alien.weights != ""
    assert alien.shared_with(first.prefix.ids + [1], "") == 0
    again = generate_answer(lm, follow, max_tokens=4, keep_cache=True, prefix=alien)
    full = generate_answer(lm, follow, max_tokens=4, keep_cache=True)
    assert again.reused_tokens == 0 and again.token_ids == full.token_ids


def test_a_conversation_read_otherwise_reuses_the_part_it_starts_with(components):
    """A follow-up after a task turn reads that task's exchange (it leans on it); the turn after leaves the exchange
    out again (``without_task_exchanges``), so the cache no longer holds the start of what the model reads. It is cut
    to the tokens both start with, and only the rest is prefilled: the same tokens and features as a full prefill."""
    chat = Chat(components)
    chat.ask(EVERYDAY[0])
    chat.ask(f"{TASKS['spell']} apple")
    chat.messages[-1]["content"] = '{"word": "a-p-p-l-e"}'  # a task's answer alone, as the tuned model gives it
    leaning = chat.ask("And what is its population?")
    assert any(m["content"] == f"{TASKS['spell']} apple" for m in leaning.messages)  # it reads the task's exchange
    held = list(chat.prefix.ids)
    after = chat.ask("What is the population of Tokyo?")
    seen = after.messages
    assert all(m["content"] != f"{TASKS['spell']} apple" for m in seen)  # the task exchange is left out again
    from mlx_sdm.lm.prompt import render_prompt

    rendered = render_prompt(components.lm.tokenizer, seen)
    shared = next(i for i, (a, b) in enumerate(zip(rendered, held)) if a != b)
    assert 0 < after.answer.reused_tokens == shared < len(held)
    full = _fresh(components, chat.messages[:-1])
    assert after.answer.token_ids == full.answer.token_ids
    np.testing.assert_allclose(after.answer.features, full.answer.features, atol=1e-5)
