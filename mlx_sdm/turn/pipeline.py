"""One turn, start to end, as a stream: a :class:`TurnRequest` (the conversation so far + options) in;
out come the answer's :class:`TokenPiece` s as they are generated, then (on a judged turn)
:class:`AnswerComplete` while the verifier reads it, then its :class:`AnswerVerdict`, the
:class:`MonitorReading`, the :class:`Escalation`, and last the one finished record,
:class:`TurnOutcome` (as mlx-lm's ``stream_generate`` yields its responses, the last saying why it stopped).

    pipeline = TurnPipeline(components)                 # model, verifier, head: see app/loading.py
    for item in pipeline.stream(TurnRequest([{"role": "user", "content": "..."}]), stop=event):
        if isinstance(item, TokenPiece):
            print(item.text, end="")
    outcome = item                                      # the last item is the TurnOutcome
    outcome = pipeline.run(request)                     # or: the stream run to its end

No thread, store or UI is involved: the CLI (``generate``), the turn service behind the chat engine
and the server, and the tests loop over it. The steps:

0. plan (:class:`TurnPlan`, before generation; :meth:`TurnPipeline.fit` then fits it into the model's
   context, with room for the answer and the follow-up prompts): route THIS turn's question (its last user message)
   with the one router (``DocumentVerifier.route``: a task's instruction, else the question router's
   reading, a follow-up read with the user message before it). A task question is answered and judged
   as that task alone, as the verifier was built (the task's system prompt, the question without the
   earlier turns), so it gets the same answer and verdict as turn 1 or 5; a task asked in a person's own
   words is asked as the task's own instruction with their payload (``TaskRoute.asked``); only a
   question that starts (or is asked as) a task's instruction decodes with an SDM-network head trained
   on that task. Every other turn sees the whole conversation, with no system prompt of ours and the
   model's own head: the answer is plain mlx-lm's; an everyday question is judged by the open-question
   verifier on that question (a follow-up: with the question it leans on) and the answer's first 64
   tokens, and a message with no checkable answer is not judged.
1. generate: stream tokens (log-probs and the document features ``[mean(h_0..h_k); h_k]`` come
   from the same pass, docs/method.md § 15.3); on a judged turn the answer ends at the unit the
   verifier judges (the closing brace of the JSON answer for ``json_close`` verifiers), so a verdict
   covers exactly the text shown; anything after it is ``unverified_tail``.
2. verify: the verifier's :class:`DocumentVerdict` on that turn's question and answer (verified /
   not verified / out of scope; a question that starts none of a routing verifier's tasks is out of
   scope with no estimator pass), or the reason there is none (no verifier fits the model).
3. monitor (when the caller passes a session's monitor): AUQ level and cumulative confidence,
   TRACER prefix risk, P(True) reusing the answer's KV cache.
4. escalate: MEDIUM logs, HIGH pauses (the model states its uncertainty), CRITICAL aborts.
"""

from __future__ import annotations

import threading
import time
import warnings
from dataclasses import replace
from typing import Any, Callable, Iterator

import numpy as np

from mlx_sdm.errors import DataError
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.coverage import RouteKind, TaskRoute, match_instruction
from mlx_sdm.network.verdict import REASON_EMPTY_ANSWER, REASON_NO_CHECKABLE_ANSWER, REASON_NOT_A_TASK, DocumentVerdict
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.lm.prompt import FittedPrompt, fit_prompt
from mlx_sdm.turn.answer import GeneratedAnswer, PrefixCache, TopLogprobs, settle_prefix, stream_answer
from mlx_sdm.turn.escalation import REFLECTION_PROMPT, Escalation, TurnStatus, plan_escalation, verdict_review_reasons
from mlx_sdm.turn.values import (
    ChatMessage,
    TurnComponents,
    TurnItem,
    AnswerComplete,
    TurnOptions,
    TurnOutcome,
    TurnPlan,
    TurnKind,
    TurnRequest,
    AnswerVerdict,
    last_user_text,
    parse_tool_calls,
    previous_user_text,
)

#: on_prefill(done, total): the answer prompt's new tokens prefilled so far (mlx-lm's prompt_progress_callback)
PrefillCallback = Callable[[int, int], None]
#: Context kept free after the answer for what the turn asks the model next about it, with the template's tokens:
#: P(True)'s question (~25 tokens on SmolLM2) or the reflection's request (REFLECTION_PROMPT, ~70), so either
#: extends the answer's KV cache instead of fitting (and prefilling) the conversation again.
FOLLOW_UP_PROMPT_TOKENS = 128


class TurnPipeline:
    """generate → verify → monitor → escalate for one turn (see the module docstring)."""

    def __init__(self, components: TurnComponents):
        self.components = components

    # -- the recipe the verifier was built with, and the plan of a turn ----------------------------
    def delimiter_for(self, route: TaskRoute) -> str:
        """Where the judged answer ends for this route: the delimiter of the verifier that judges it (the JSON
        unit's closing brace for the task suite, the answer's head for open questions)."""
        verifier = self.components.verifier
        if verifier is None:
            return "end_of_turn"
        return verifier.recipe_for(route.task).delimiter

    @property
    def routes_tasks(self) -> bool:
        """The verifier knows its tasks' instructions (a question that starts none is out of its scope)."""
        verifier = self.components.verifier
        return verifier is not None and verifier.recipe.routes_tasks

    def route(self, messages: list[ChatMessage] | None) -> TaskRoute:
        """Where this turn's question (the last user message) goes: the verifier's route (a follow-up read with
        the user message before it), else the task of the head's list it starts; the verdict uses that task's
        review labels only."""
        question = last_user_text(messages or [])
        verifier = self.components.verifier
        route = verifier.route(question, previous_user_text(messages or [])) if verifier is not None else TaskRoute()
        tasks = self.components.head_tasks
        if route.matched or self.routes_tasks or not tasks:
            return route
        index = match_instruction([t.instruction for t in tasks], question)
        return route if index is None else TaskRoute(tasks[index].system, None, tasks[index].instruction)

    def _delimiter(self, plan: TurnPlan) -> str:
        """The judged unit's end on a judged turn; an unjudged answer is read whole (nothing is left unverified)."""
        return self.delimiter_for(plan.route) if plan.judge else "end_of_turn"

    def head_for(self, route: TaskRoute, question: str) -> Any | None:
        """The head a turn decodes with: the SDM-network head only when the question as the model is asked it
        starts one of the tasks it was trained on (the same router as the verifier's), else the model's own
        (None). A task asked in a person's own words is asked as the task's own instruction with their payload
        (``route.asked``), so it decodes as that task's prompts do."""
        head, tasks = self.components.head, self.components.head_tasks
        if head is None or tasks is None:
            return head
        return head if match_instruction([t.instruction for t in tasks], question) is not None else None

    @staticmethod
    def system_prompt(options: TurnOptions, route: TaskRoute) -> str | None:
        """``--system`` when given, else the routed task's (or a single-task verifier's) system prompt, else
        None: the product adds no system prompt of its own, so an everyday turn is rendered exactly as plain
        mlx-lm renders it (the model's chat template decides; SmolLM2's adds its own default)."""
        if options.system_prompt is not None:
            return options.system_prompt or None
        return route.system

    def plan(self, messages: list[ChatMessage], options: TurnOptions = TurnOptions()) -> TurnPlan:
        """Route this turn's question, then what the model sees, what the verifier judges and the head."""
        route = self.route(messages)
        # the question as the model is asked it and the verifier reads it: a task asked in a person's words as
        # the task's own prompt, a follow-up with the question it leans on (route.asked); else as typed
        question = {"role": "user", "content": route.asked or last_user_text(messages)}
        system = self.system_prompt(options, route)
        ours = [{"role": "system", "content": system}] if system else []
        if route.matched:  # a task question is answered as that task alone, as the verifier was built
            seen = ours + [question]
        elif messages and messages[0].get("role") == "system":  # the caller's own system prompt
            seen = list(messages)
        else:
            seen = ours + list(messages)
        judged = ([seen[0]] if seen and seen[0].get("role") == "system" else []) + [question]
        judge = self.components.verifier is not None and route.how is not RouteKind.NO_CHECKABLE_ANSWER and (
            route.matched or route.open_question or not self.routes_tasks)
        return TurnPlan(route, seen, judged, self.head_for(route, question["content"]), judge)

    def fit(self, plan: TurnPlan, options: TurnOptions) -> tuple[TurnPlan, FittedPrompt | None]:
        """The plan with its conversation fitted into the model's context (``lm.prompt.fit_prompt``, the one
        rule), leaving room for the answer and the turn's follow-up prompts (P(True), the reflection), and what
        was cut (None when it fits as it is). What the verifier judges holds the same, fitted, question."""
        lm = self.components.lm
        follow_up = FOLLOW_UP_PROMPT_TOKENS if options.enable_p_true or options.generate_reflection else 0
        budget = lm.max_context - options.max_tokens - follow_up - (
            options.reflection_max_tokens if options.generate_reflection else 0)
        if budget < 1:
            raise DataError(f"max_tokens={options.max_tokens} leaves no room for the prompt in the model's "
                            f"{lm.max_context:,}-token context; ask for fewer.", field="max_tokens")
        fitted = fit_prompt(lm.tokenizer, plan.messages, budget, context=lm.max_context)
        if not fitted.was_cut:
            return plan, None
        warnings.warn(fitted.sentence(), stacklevel=2)  # said once, as the answer starts (generate: a "note:" line)
        seen = list(fitted.messages or ())
        system = [seen[0]] if seen[0].get("role") == "system" else []
        judged = seen if plan.judged_is_generated else system + [seen[-1]]
        return replace(plan, messages=seen, judged=judged), fitted

    # -- the turn -------------------------------------------------------------------------------
    def run(self, request: TurnRequest, **kwargs: Any) -> TurnOutcome:
        """:meth:`stream` run to its end: the turn's :class:`TurnOutcome` (its last item)."""
        for item in self.stream(request, **kwargs):
            pass
        assert isinstance(item, TurnOutcome)
        return item

    def stream(self, request: TurnRequest, *, stop: threading.Event | None = None, monitor: Any = None,
               prefix: PrefixCache | None = None, on_prefill: PrefillCallback | None = None) -> Iterator[TurnItem]:
        """One turn, yielded in the order of :data:`~mlx_sdm.turn.values.TurnItem`. ``stop``: set it (e.g.
        while handling a piece) to end the answer at that token; ``monitor``: the session's
        :class:`~mlx_sdm.turn.monitoring.SessionMonitor` (None = no monitoring, e.g. ``generate``);
        ``prefix``: this conversation's previous KV cache; ``on_prefill``: a long prompt's progress, as
        mlx-lm's ``prompt_progress_callback`` (called before the first piece)."""
        stop = stop or threading.Event()
        options = request.options
        plan, fitted = self.fit(self.plan(request.messages, options), options)
        messages = plan.messages
        started, first_token_s = time.perf_counter(), None
        for item in self._generate(plan, options, stop, prefix, on_prefill):
            if isinstance(item, GeneratedAnswer):
                gen = item
                break
            if first_token_s is None:
                first_token_s = time.perf_counter() - started
            yield item
        generation_s = time.perf_counter() - started
        outcome = TurnOutcome(
            status=TurnStatus.CANCELLED if gen.cancelled else TurnStatus.DONE, answer=gen, messages=messages,
            task=plan.route.task, decoded_with_head=plan.head is not None, first_token_s=first_token_s,
            generation_s=generation_s, verifier=self.components.verifier_path if self.components.verifier else None,
            prompt_fit=fitted,
        )
        if monitor is not None and request.kind is not TurnKind.AGAIN:  # TRACER's user step, after generation
            monitor.observe_user(last_user_text(request.messages), new_turn=request.kind is TurnKind.QUESTION)
        if gen.cancelled:
            gen.release()
            yield outcome
            return
        if plan.judge:  # the verifier reads the answer now (force-decoding it when the model saw more)
            yield AnswerComplete(len(gen.token_ids))
        outcome.verdict, outcome.unverifiable_reason = self.judge(
            plan, gen.features if plan.judged_is_generated else None, gen.text, options)
        yield AnswerVerdict(outcome.verdict, outcome.unverifiable_reason)
        outcome.tool_calls = parse_tool_calls(gen.text)
        if monitor is not None:
            outcome.monitor = self._monitor(monitor, plan, gen, outcome, options)
            yield outcome.monitor
        if options.reuse_cache:
            outcome.prefix = settle_prefix(gen.prefix)
        gen.release()  # the record goes on without the KV cache (the next turn's is outcome.prefix)
        outcome.escalation = plan_escalation(outcome.monitor, [c.name for c in outcome.tool_calls], outcome.verdict)
        outcome.status = outcome.escalation.status
        if outcome.escalation.escalated:
            yield outcome.escalation
        if outcome.escalation.reflect and options.generate_reflection:
            for item in self._reflect(plan, gen.text, options, stop, outcome.prefix):
                if isinstance(item, GeneratedAnswer):
                    outcome.reflection = item.text
                else:
                    yield item
            outcome.prefix = settle_prefix(outcome.prefix)  # the reflection's tokens leave the cache again
        yield outcome

    def judge(self, plan: TurnPlan, features: np.ndarray | None, text: str,
              options: TurnOptions = TurnOptions()) -> tuple[DocumentVerdict | None, str | None]:
        """The verdict on one turn's answer as the verifier was built: that turn's question and answer
        (``features`` of exactly ``plan.judged``; None = force-decode them). A question that starts none
        of a routing verifier's tasks is out of scope with no estimator pass."""
        verifier = self.components.verifier
        if verifier is None:
            return None, self.components.unverifiable_reason or "no verifier is loaded"
        if not plan.judge:
            why = REASON_NO_CHECKABLE_ANSWER if plan.route.how is RouteKind.NO_CHECKABLE_ANSWER else REASON_NOT_A_TASK
            return DocumentVerdict(None, coverage=verifier.coverage, unjudged=why, route=plan.route), None
        if features is None and text.strip():
            try:
                features = self._force_decode(plan.judged, text, self.delimiter_for(plan.route))
            except DataError:  # nothing of the answer is left to read once tokenised (e.g. only special tokens)
                features = None
        return self.verify(features, text if features is not None else "", options, task=plan.route.task,
                           route=plan.route)

    def verify(self, features: np.ndarray | None, text: str, options: TurnOptions = TurnOptions(), *,
               task: str | None = None, route: TaskRoute | None = None) -> tuple[DocumentVerdict | None, str | None]:
        """The verdict on an answer's features, or (None, why there is none); ``task``: the verifier's
        task the question was routed to (:meth:`route`), whose review labels the support set holds."""
        verifier = self.components.verifier_for(task)
        if verifier is None:
            return None, self.components.unverifiable_reason or "no verifier is loaded"
        if features is None or not text:
            return DocumentVerdict(None, coverage=verifier.coverage, task=task, unjudged=REASON_EMPTY_ANSWER,
                                   route=route), None
        return verifier.judge(np.asarray(features, dtype=np.float32), explain=options.explain, task=task,
                              route=route), None

    def verify_completion(self, messages: list[ChatMessage], completion: str,
                          options: TurnOptions = TurnOptions()) -> tuple[DocumentVerdict | None, str | None]:
        """Verify a given (conversation, completion) exactly as the chat judges that turn, by force-decoding
        (review edits, ``/v1/verify``, ``mlx-sdm verify`` on text rows)."""
        return self.judge(self.plan(messages, options), None, completion, options)

    def read_answer(self, messages: list[ChatMessage], completion: str,
                    options: TurnOptions = TurnOptions()) -> TurnOutcome:
        """A completion made elsewhere judged as the chat judges that turn (``/v1/verify``): the turn's record
        of an answer that was read, not generated (no tokens; its features are those the verdict read; an
        answer the verifier does not vouch for goes to review under the verdict's reason)."""
        plan = self.plan(messages, options)
        features = self.features_of(plan, completion) if plan.judge else None
        verdict, why = self.judge(plan, features, completion, options)
        return TurnOutcome(TurnStatus.DONE, GeneratedAnswer(completion, features=features), messages=plan.messages,
                           task=plan.route.task, verdict=verdict, unverifiable_reason=why,
                           escalation=Escalation(review_reasons=verdict_review_reasons(verdict)),
                           verifier=self.components.verifier_path if self.components.verifier else None)

    def features_for(self, messages: list[ChatMessage], completion: str,
                     options: TurnOptions = TurnOptions()) -> np.ndarray:
        """The features the verifier judges for (this turn's question, ``completion``)."""
        return self.features_of(self.plan(messages, options), completion)

    def features_of(self, plan: TurnPlan, completion: str) -> np.ndarray:
        """The features the verifier judges for a planned turn's question and ``completion``."""
        return self._force_decode(plan.judged, completion, self.delimiter_for(plan.route))

    def _force_decode(self, judged: list[ChatMessage], completion: str, delimiter: str) -> np.ndarray:
        from mlx_sdm.lm.features import force_decode_features

        vector = force_decode_features(self.components.lm, judged, completion, delimiter=delimiter)
        return np.asarray(vector, dtype=np.float32)

    # -- steps ----------------------------------------------------------------------------------
    def _generate(self, plan: TurnPlan, options: TurnOptions, stop: threading.Event, prefix: PrefixCache | None,
                  on_prefill: PrefillCallback | None) -> Iterator[TokenPiece | GeneratedAnswer]:
        top = TopLogprobs(options.top_logprobs) if options.top_logprobs > 0 else None
        return stream_answer(
            self.components.lm, plan.messages, max_tokens=options.max_tokens, temperature=options.temperature,
            head=plan.head, stop=stop, features=True, keep_cache=True, delimiter=self._delimiter(plan),
            prefix=prefix if options.reuse_cache else None,
            stop_at_delimiter=options.stop_at_judged_unit and plan.judge,
            top_logprobs=top, on_prefill=on_prefill,
        )

    def _monitor(self, monitor: Any, plan: TurnPlan, gen: GeneratedAnswer, outcome: TurnOutcome,
                 options: TurnOptions) -> MonitorReading:
        lm, messages = self.components.lm, plan.messages
        p_true = sampler = None
        if options.enable_p_true:  # P(True) reuses the answer's KV cache: only the question is prefilled
            from mlx_sdm.monitor.online.p_true import PTrueScorer

            p_true = PTrueScorer(lm.model, lm.tokenizer, messages + [{"role": "assistant", "content": gen.text}],
                                 cache=gen.cache, cached_tokens=gen.cached_tokens, max_context=lm.max_context)
        if options.semantic_sampling:
            from mlx_sdm.turn.monitoring import ChatSampler

            sampler = ChatSampler(lm, messages, len(gen.token_ids), head=plan.head)
        return monitor.score_answer(answer=gen.text, tokens=gen.tokens, logprobs=gen.logprobs,
                                    tool_calls=outcome.tool_calls, p_true=p_true, verdict=outcome.verdict,
                                    sampler=sampler)

    def _reflect(self, plan: TurnPlan, answer: str, options: TurnOptions, stop: threading.Event,
                 prefix: PrefixCache | None = None) -> Iterator[TokenPiece | GeneratedAnswer]:
        """docs/monitoring.md, AUQ reflection: on HIGH the model states what it is NOT confident about.
        ``prefix``: the answer's KV cache (the turn's next prefix): the reflection request extends it, so only
        the request is prefilled, not the whole conversation again; the caller trims it back after."""
        ask = plan.messages + [{"role": "assistant", "content": answer}, {"role": "system", "content": REFLECTION_PROMPT}]
        return stream_answer(self.components.lm, ask, max_tokens=options.reflection_max_tokens,
                             temperature=options.temperature, head=None, stop=stop, phase="reflection",
                             features=False, keep_cache=prefix is not None, prefix=prefix,
                             delimiter=self._delimiter(plan), keep_last=2)
