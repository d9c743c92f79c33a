"""One turn, start to end, as a stream: a :class:`TurnRequest` (the conversation so far + options) in;
out come the answer's :class:`TokenPiece` s as they are generated, then (on a judged turn)
:class:`AnswerComplete` while the verifier reads it, then its verdict (a :class:`DocumentVerdict`), the
:class:`MonitorReading`, the :class:`Escalation`, and last the one finished record,
:class:`TurnOutcome` (as mlx-lm's ``stream_generate`` yields its responses, the last saying why it stopped).

    pipeline = TurnPipeline(components)                 # model, verifier, head: see app/loading.py
    for item in pipeline.stream(TurnRequest([{"role": "user", "content": "..."}]), stop=event):
        if isinstance(item, TokenPiece):
            print(item.text, end="")
    outcome = item                                      # the last item is the TurnOutcome
    outcome = pipeline.run(request)                     # or: the stream run to its end
    outcome = pipeline.judge_text(request, "an answer") # text made elsewhere, judged as the chat judges it

The two public ways to judge: :meth:`TurnPipeline.stream` for an answer the pipeline generates and
:meth:`TurnPipeline.judge_texts` (:meth:`~TurnPipeline.judge_text` for one) for answers made elsewhere
(``/v1/verify``, ``mlx-sdm verify``, an edited answer in review); both plan the turn the same way and reach
the verifier through the same step.

No thread, store or UI is involved: the CLI (``generate``), the turn service behind the chat engine
and the server, and the tests loop over it. The steps:

0. plan (:class:`TurnPlan`, before generation; the pipeline then fits it into the model's
   context, with room for the answer and the follow-up prompts): route THIS turn's question (its last user message)
   with the verifier's router (``DocumentVerifier.route``: a task's instruction, else the question router's
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
   scope with no estimator pass; no verifier, saying why, when none fits the model).
3. monitor (when the caller passes a session's monitor): AUQ level and cumulative confidence,
   TRACER prefix risk, P(True) reusing the answer's KV cache.
4. escalate: MEDIUM logs, HIGH pauses (the model states its uncertainty), CRITICAL aborts.
"""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple, Sequence

import numpy as np

from mlx_sdm.errors import DataError
from mlx_sdm.monitor.online.degenerate import DegenerateAnswer, degenerate_answer
from mlx_sdm.monitor.online.reading import MonitorReading
from mlx_sdm.network.coverage import RouteKind, TaskRoute, match_instruction
from mlx_sdm.network.verdict import (
    REASON_EMPTY_ANSWER,
    REASON_NO_CHECKABLE_ANSWER,
    REASON_NOT_A_TASK,
    REASON_SECOND_LOOK_OFF,
    DocumentVerdict,
)
from mlx_sdm.lm.decoding import LOOP_RETRY, NO_REPEAT, WRITING, Decoding
from mlx_sdm.lm.pieces import TokenPiece
from mlx_sdm.lm.prompt import FittedPrompt, fit_prompt, render_prompt
from mlx_sdm.turn.answer import GeneratedAnswer, PrefixCache, TopLogprobs, settle_prefix, stream_answer
from mlx_sdm.turn.escalation import REFLECTION_PROMPT, Escalation, TurnStatus, plan_escalation, verdict_review_reasons
from mlx_sdm.turn.seams import TurnMonitor, TurnVerifier, VerifierProvider
from mlx_sdm.monitor.session_file.records import ToolCall
from mlx_sdm.turn.values import (
    ChatMessage,
    TurnComponents,
    TurnItem,
    AnswerComplete,
    CheckingAnswers,
    TurnOptions,
    TurnOutcome,
    TurnPlan,
    TurnKind,
    TurnRequest,
    last_user_text,
    parse_tool_calls,
    previous_user_text,
    without_task_exchanges,
)

if TYPE_CHECKING:
    from mlx_sdm.lm.generation import Head
    from mlx_sdm.lm.sampling import SampledAnswers
    from mlx_sdm.network.second_look import SecondLookSpec

#: on_prefill(done, total): the answer prompt's new tokens prefilled so far (mlx-lm's prompt_progress_callback)
PrefillCallback = Callable[[int, int], None]
#: Context kept free after the answer for what the turn asks the model next about it, with the template's tokens:
#: P(True)'s question (~25 tokens on SmolLM2) or the reflection's request (REFLECTION_PROMPT, ~70), so either
#: extends the answer's KV cache instead of fitting (and prefilling) the conversation again.
FOLLOW_UP_PROMPT_TOKENS = 128


class _Timing(NamedTuple):
    first_token_s: float | None  # from the request (``TurnRequest.received``: the time it waited included)
    generation_s: float


class TurnPipeline:
    """generate → verify → monitor → escalate for one turn (see the module docstring)."""

    def __init__(self, components: TurnComponents, verifiers: VerifierProvider | None = None):
        self.components = components
        #: which verifier judges a task's questions (the review service: the base plus that task's labels); None:
        #: ``components.verifier`` judges every task
        self.verifiers = verifiers

    def _judging(self, verifier: TurnVerifier, task: str | None) -> TurnVerifier:
        """The verifier that judges a question routed to ``task`` (``verifier``: the loaded one)."""
        return verifier if self.verifiers is None else self.verifiers.verifier_for(task)

    # -- the plan of a turn -------------------------------------------------------------------------
    def plan(self, messages: list[ChatMessage], options: TurnOptions = TurnOptions()) -> TurnPlan:
        """Route this turn's question, then what the model sees, what the verifier judges and the head."""
        route = self._route(messages)
        # the question as the model is asked it and the verifier reads it: a task asked in a person's words as
        # the task's own prompt, a follow-up with the question it leans on (route.asked); else as typed
        question = {"role": "user", "content": route.asked or last_user_text(messages)}
        system = self._system_prompt(options, route)
        ours = [{"role": "system", "content": system}] if system else []
        if route.matched:  # a task question is answered as that task alone, as the verifier was built
            seen = ours + [question]
        elif messages and messages[0].get("role") == "system":  # the caller's own system prompt
            seen = without_task_exchanges(list(messages))
        else:  # and any other turn without the task turns' JSON exchanges
            seen = ours + without_task_exchanges(list(messages))
        judged = ([seen[0]] if seen and seen[0].get("role") == "system" else []) + [question]
        judge = self.components.verifier is not None and route.how is not RouteKind.NO_CHECKABLE_ANSWER and (
            route.matched or route.open_question or not self._routes_tasks()) and not _unjudged_task(route)
        adapters = self.components.lm.adapters
        adapted = adapters.serves(route.instruction) if adapters is not None and route.matched else None
        return TurnPlan(route, seen, judged, self._head_for(question["content"]), judge, adapted)

    def _delimiter_for(self, route: TaskRoute) -> str:
        """Where the judged answer ends for this route: the delimiter of the verifier that judges it (the JSON
        unit's closing brace for the task suite, the answer's head for open questions)."""
        verifier = self.components.verifier
        return "end_of_turn" if verifier is None else verifier.recipe_for(route.task).delimiter

    def _routes_tasks(self) -> bool:
        """The verifier knows its tasks' instructions (a question that starts none is out of its scope)."""
        verifier = self.components.verifier
        return verifier is not None and verifier.recipe.routes_tasks

    def _route(self, messages: list[ChatMessage]) -> TaskRoute:
        """Where this turn's question (the last user message) goes: the verifier's route (a follow-up read with
        the user message before it), else the task of the head's list it starts; the verdict uses that task's
        review labels only."""
        question = last_user_text(messages)
        verifier = self.components.verifier
        route = verifier.route(question, previous_user_text(messages)) if verifier is not None else TaskRoute()
        tasks = self.components.head_tasks or self.components.adapted_tasks
        if route.matched or not tasks:
            return route
        if self._routes_tasks():  # a task of the model's its verifier does not judge (none could be built for it):
            tasks = self.components.adapted_tasks  # answered as that task, with its adapters, and not judged
            index = match_instruction([t.instruction for t in tasks], question)
            return route if index is None else TaskRoute(tasks[index].system, None, tasks[index].instruction,
                                                         kind=RouteKind.NOT_COVERED)
        index = match_instruction([t.instruction for t in tasks], question)
        return route if index is None else TaskRoute(tasks[index].system, None, tasks[index].instruction)

    def _head_for(self, question: str) -> Head | None:
        """The head a turn decodes with: the SDM-network head only when the question as the model is asked it
        starts one of the tasks it was trained on (the same router as the verifier's), else the model's own
        (None). A task asked in a person's own words is asked as the task's own instruction with their payload
        (``route.asked``), so it decodes as that task's prompts do."""
        task_heads = self.components.task_heads
        if task_heads:  # a fine-tuned folder's heads: the one of the task the question starts, else none
            index = match_instruction([t.instruction for t, _ in task_heads], question)
            return task_heads[index][1] if index is not None else None
        head, tasks = self.components.head, self.components.head_tasks
        if head is None or tasks is None:
            return head
        return head if match_instruction([t.instruction for t in tasks], question) is not None else None

    @staticmethod
    def _system_prompt(options: TurnOptions, route: TaskRoute) -> str | None:
        """``--system`` when given, else the routed task's (or a single-task verifier's) system prompt, else
        None: the product adds no system prompt of its own, so an everyday turn is rendered exactly as plain
        mlx-lm renders it (the model's chat template decides; SmolLM2's adds its own default)."""
        if options.system_prompt is not None:
            return options.system_prompt or None
        return route.system

    def render(self, plan: TurnPlan) -> FittedPrompt:
        """What the model is asked in ``plan``, rendered whole, uncut (the server counts it against the context,
        then hands it to :meth:`fit`, which uses it as it is when it fits)."""
        lm = self.components.lm
        ids = render_prompt(lm.tokenizer, plan.messages)
        return FittedPrompt(tuple(ids), tuple(plan.messages), len(ids), len(ids), context=lm.max_context)

    def fit(self, plan: TurnPlan, options: TurnOptions, rendered: FittedPrompt | None = None) -> TurnPlan:
        """The plan with its prompt fitted into the model's context (``lm.prompt.fit_prompt``), leaving room for
        the answer and the turn's follow-up prompts (P(True), the reflection): ``plan.prompt``, the ids the model
        reads. ``rendered``: the plan's prompt already rendered whole (:meth:`render`), used as it is when it fits,
        so a prompt is rendered once. A conversation that must be cut is cut here, and what the verifier judges
        holds the same, fitted, question."""
        lm = self.components.lm
        follow_up = FOLLOW_UP_PROMPT_TOKENS if options.enable_p_true or options.generate_reflection else 0
        budget = lm.max_context - options.max_tokens - follow_up - (
            options.reflection_max_tokens if options.generate_reflection else 0)
        if budget < 1:
            raise DataError(f"max_tokens={options.max_tokens} leaves no room for the prompt in the model's "
                            f"{lm.max_context:,}-token context; ask for fewer.", field="max_tokens")
        if rendered is not None and not rendered.was_cut and len(rendered.ids) <= budget:
            return replace(plan, prompt=replace(rendered, budget=budget))
        fitted = fit_prompt(lm.tokenizer, plan.messages, budget, context=lm.max_context)
        if not fitted.was_cut:
            return replace(plan, prompt=fitted)
        warnings.warn(fitted.sentence(), stacklevel=2)  # said once, as the answer starts (generate: a "note:" line)
        seen = list(fitted.messages or ())
        system = [seen[0]] if seen[0].get("role") == "system" else []
        judged = seen if plan.judged_is_generated else system + [seen[-1]]
        return replace(plan, messages=seen, judged=judged, prompt=fitted)

    # -- a turn the pipeline generates ------------------------------------------------------------
    def run(self, request: TurnRequest, **kwargs) -> TurnOutcome:
        """:meth:`stream` run to its end: the turn's :class:`TurnOutcome` (its last item)."""
        for item in self.stream(request, **kwargs):
            pass
        assert isinstance(item, TurnOutcome)
        return item

    def stream(self, request: TurnRequest, *, plan: TurnPlan | None = None, stop: threading.Event | None = None,
               monitor: TurnMonitor | None = None, prefix: PrefixCache | None = None,
               keep_prefix: Callable[[PrefixCache], None] | None = None,
               on_prefill: PrefillCallback | None = None) -> Iterator[TurnItem]:
        """One turn, yielded in the order of :data:`~mlx_sdm.turn.values.TurnItem`. ``plan``: the request's plan
        already made and fitted (the server's ``prepare``; None: planned here); ``stop``: set it (e.g. while
        handling a piece) to end the answer at that token; ``monitor``: the session's
        :class:`~mlx_sdm.turn.monitoring.SessionMonitor` (None = no monitoring, e.g. ``generate``);
        ``prefix``: this conversation's previous KV cache; ``keep_prefix``: called with the KV cache the
        conversation's next turn can reuse (the record carries no cache); ``on_prefill``: a long prompt's
        progress, as mlx-lm's ``prompt_progress_callback`` (called before the first piece)."""
        options = request.options
        if plan is None or plan.prompt is None:
            plan = self.fit(plan or self.plan(request.messages, options), options)
        with self._weights(plan.adapted):  # the adapters on for a turn of their tasks, for all it asks of the model
            yield from self._stream(request, plan, stop or threading.Event(), monitor, prefix, keep_prefix, on_prefill)

    def _weights(self, adapted: str | None) -> contextlib.AbstractContextManager:
        """The model as this turn uses it: the adapter set of task ``adapted`` in, or none (the base model's own
        modules); a model with no adapters as it is."""
        adapters = self.components.lm.adapters
        return adapters.use(adapted) if adapters is not None else contextlib.nullcontext()

    def _stream(self, request: TurnRequest, plan: TurnPlan, stop: threading.Event, monitor: TurnMonitor | None,
                prefix: PrefixCache | None, keep_prefix: Callable[[PrefixCache], None] | None,
                on_prefill: PrefillCallback | None) -> Iterator[TurnItem]:
        if plan.adapted:  # a task turn: answered alone, none of the conversation in its prompt (``plan``)
            # so it extends no cached conversation, and the cache it makes (its task prompt, its adapters' keys and
            # values) serves no later turn. The conversation's cached prefix goes on to the next turn as it came:
            # the everyday turn after a task turn prefills its new tokens only, as after an everyday turn.
            if prefix is not None and keep_prefix is not None:
                keep_prefix(prefix)
            prefix, request = None, replace(request, options=replace(request.options, reuse_cache=False))
        options = request.options
        started = time.perf_counter()
        since, first_token_s = (started if request.received is None else request.received), None
        for item in self._answer_once_more_if_repeated(request, plan, options, stop, prefix, on_prefill):
            if isinstance(item, GeneratedAnswer):
                gen = item
                break
            if first_token_s is None:
                first_token_s = time.perf_counter() - since
            yield item
        timing = _Timing(first_token_s, time.perf_counter() - started)
        if monitor is not None and request.kind is not TurnKind.AGAIN:  # TRACER's user step, after generation
            monitor.observe_user(last_user_text(request.messages), new_turn=request.kind is TurnKind.QUESTION)
        if gen.cancelled:
            gen.release()
            yield self._record(request, plan, gen, TurnStatus.CANCELLED, timing)
            return
        yield from self._after_answer(request, plan, gen, timing, stop, monitor, keep_prefix)

    def _after_answer(self, request: TurnRequest, plan: TurnPlan, gen: GeneratedAnswer, timing: _Timing,
                      stop: threading.Event, monitor: TurnMonitor | None,
                      keep_prefix: Callable[[PrefixCache], None] | None) -> Iterator[TurnItem]:
        """A generated answer judged, read by the monitor and escalated; the turn's record last."""
        options = request.options
        if plan.judge:  # the verifier reads the answer now (force-decoding it when the model saw more)
            yield AnswerComplete(len(gen.token_ids))
        features = gen.features if plan.judged_is_generated else None
        drawn = None
        spec = self._second_look_spec(plan, options)
        if spec is not None and gen.text:  # the second look: K more answers from the answer's own prompt cache
            yield CheckingAnswers(spec.k)
            drawn = self._draw_from_cache(spec, gen)
        verdict = self._judge(plan, features, gen.text, options, drawn=drawn, logprobs=gen.logprobs)
        yield verdict
        tool_calls = parse_tool_calls(gen.text)
        reading = None
        if monitor is not None:
            reading = self._monitor(monitor, plan, gen, tool_calls, verdict, options,
                                    shared=drawn.texts if drawn is not None else ())
            yield reading
        kept = settle_prefix(gen.prefix) if options.reuse_cache else None
        gen.release()  # the record goes on without the KV cache (the next turn's is handed to keep_prefix)
        escalation = plan_escalation(reading, [c.name for c in tool_calls], verdict)
        if escalation.escalated:
            yield escalation
        reflection = None
        if escalation.reflect and options.generate_reflection:
            for item in self._reflect(plan, gen.text, options, stop, kept):
                if isinstance(item, GeneratedAnswer):
                    reflection = item.text
                else:
                    yield item
            kept = settle_prefix(kept)  # the reflection's tokens leave the cache again
        if kept is not None and keep_prefix is not None:
            keep_prefix(kept)
        yield self._record(request, plan, gen, escalation.status, timing, verdict=verdict, monitor=reading,
                           tool_calls=tool_calls, escalation=escalation, reflection=reflection)

    def _record(self, request: TurnRequest, plan: TurnPlan, answer: GeneratedAnswer, status: TurnStatus,
                timing: _Timing | None = None, **judged: Any) -> TurnOutcome:
        """The turn's one record, built once: the answer, what the model saw, where it was routed, who asked and
        whether it was asked again (the request's), how long it took and (``judged``) what was made of it."""
        components = self.components
        prompt = plan.prompt if plan.prompt is not None and plan.prompt.was_cut else None
        return TurnOutcome(status, answer, messages=plan.messages, task=plan.route.task,
                           decoded_with_head=plan.head is not None,
                           verifier=components.verifier_path if components.verifier is not None else None,
                           first_token_s=None if timing is None else timing.first_token_s,
                           generation_s=0.0 if timing is None else timing.generation_s, prompt_fit=prompt,
                           source=request.source, resampled=request.resampled,
                           feature_model=components.feature_model if answer.features is not None else None, **judged)

    # -- answers made elsewhere -------------------------------------------------------------------
    def judge_text(self, request: TurnRequest, completion: str) -> TurnOutcome:
        """One answer made elsewhere, judged as the chat judges that turn: :meth:`judge_texts` of one."""
        return self.judge_texts([(request, completion)])[0]

    def judge_texts(self, answers: Sequence[tuple[TurnRequest, str]], *, plans: Sequence[TurnPlan] | None = None,
                    on_progress: Callable[[int], None] | None = None) -> list[TurnOutcome]:
        """Answers made elsewhere (``/v1/verify``, ``mlx-sdm verify``, an edited answer in review), each a
        (conversation with its options, completion), judged as the chat judges that turn: planned as
        :meth:`stream` plans it, the completion force-decoded after exactly what the verifier judges (in
        length-sorted batches, one per judged unit's delimiter), and the verdict made by the same step. Each
        record holds no tokens; its features are those the verdict read, and an answer the verifier does not
        vouch for goes to review under the verdict's reason. ``plans``: the requests' plans already made (the server's
        ``prepare``; None: planned here). ``on_progress(n)``: n more answers read."""
        if plans is None:
            plans = [self.plan(request.messages, request.options) for request, _ in answers]
        features = self._read_texts(plans, [completion for _, completion in answers], on_progress)
        out = []
        for (request, completion), plan, vector in zip(answers, plans, features):
            verdict = self._judge(plan, vector, completion, request.options)
            out.append(self._record(request, plan, GeneratedAnswer(completion, features=vector), TurnStatus.DONE,
                                    verdict=verdict, escalation=Escalation(review_reasons=verdict_review_reasons(verdict))))
        return out

    def _read_texts(self, plans: Sequence[TurnPlan], completions: Sequence[str],
                    on_progress: Callable[[int], None] | None) -> list[np.ndarray | None]:
        """The features the verifier judges for each planned (question, completion): one forward pass per
        answer, batched by the judged unit's delimiter; None where there is nothing to read (no judgement, an
        empty answer, or nothing left of it once tokenised, e.g. only special tokens)."""
        out: list[np.ndarray | None] = [None] * len(plans)
        by_reading: dict[tuple[str, str | None], list[int]] = {}
        for i, (plan, text) in enumerate(zip(plans, completions)):
            if plan.judge and text.strip():
                by_reading.setdefault((self._delimiter_for(plan.route), plan.adapted), []).append(i)
        progress = on_progress or (lambda n: None)
        progress(len(plans) - sum(map(len, by_reading.values())))  # the answers with nothing to read
        for (delimiter, adapted), index in by_reading.items():
            with self._weights(adapted):
                self._read_group(plans, completions, index, delimiter, out, progress)
        return out

    def _read_group(self, plans: Sequence[TurnPlan], completions: Sequence[str], index: list[int], delimiter: str,
                    out: list[np.ndarray | None], progress: Callable[[int], None]) -> None:
        """The features of the answers ``index`` (one delimiter, one state of the adapters) into ``out``."""
        from mlx_sdm.lm.features import force_decode_batch, force_decode_features

        lm = self.components.lm
        read: list[np.ndarray | None]
        try:
            if len(index) == 1:  # one answer: one unpadded pass, as a generated turn's own features are read
                read = [force_decode_features(lm, plans[index[0]].judged, completions[index[0]], delimiter=delimiter)]
                progress(1)
            else:  # (a batch's answers are checked before any is read, so a DataError has counted none)
                read = [d.vector for d in force_decode_batch(lm, [(plans[i].judged, completions[i]) for i in index],
                                                             delimiter=delimiter, progress=progress)]
        except DataError:  # one answer cannot be read: read them one by one, so only it goes without
            read = []
            for i in index:
                try:
                    read.append(force_decode_features(lm, plans[i].judged, completions[i], delimiter=delimiter))
                except DataError:
                    read.append(None)
            progress(len(index))
        for i, vector in zip(index, read):
            out[i] = None if vector is None else np.asarray(vector, dtype=np.float32)

    # -- the verdict ------------------------------------------------------------------------------
    def _judge(self, plan: TurnPlan, features: np.ndarray | None, text: str, options: TurnOptions, *,
               drawn: SampledAnswers | None = None, logprobs: Sequence[float] = ()) -> DocumentVerdict:
        """The verdict on one turn's answer as the verifier was built, from the features of exactly
        ``plan.judged`` and the answer (None on a generated turn whose model saw more: read them here); with no
        verifier, the verdict that says why. A question that starts none of a routing verifier's tasks is out of scope with
        no estimator pass; the task's own support set (its review labels) judges a routed question. A member
        that reads a second look judges from the K answers drawn (``drawn``, with the answer's per-token
        ``logprobs``; an answer made elsewhere has neither: they are drawn and read here)."""
        loaded = self.components.verifier
        if loaded is None:
            return DocumentVerdict.no_verifier(self.components.unverifiable_reason or "no verifier is loaded")
        route = plan.route
        if not plan.judge:
            why = REASON_NO_CHECKABLE_ANSWER if route.how is RouteKind.NO_CHECKABLE_ANSWER else REASON_NOT_A_TASK
            return DocumentVerdict(None, coverage=loaded.coverage, unjudged=why, route=route)
        if features is None and text.strip():
            features = self._read_texts([plan], [text], None)[0]
        verifier = self._judging(loaded, route.task)
        if features is None or not text:
            return DocumentVerdict(None, coverage=verifier.coverage, task=route.task, unjudged=REASON_EMPTY_ANSWER,
                                   route=route)
        features = np.asarray(features, dtype=np.float32)
        spec = verifier.second_look_spec(route.task)
        if spec is None:
            return verifier.judge(features, explain=options.explain, task=route.task, route=route, answer=text)
        if not options.second_look:
            return DocumentVerdict(None, coverage=verifier.coverage, task=route.task, unjudged=REASON_SECOND_LOOK_OFF,
                                   route=route)
        if drawn is None:
            drawn, logprobs = self._draw_for_text(plan, text, spec)
        from mlx_sdm.lm.minilm import load_minilm  # the member's sentence embedder (read once per process)

        look = spec.look(plan.judged[-1]["content"], text, logprobs, drawn)
        return verifier.judge_second_look(features, look, load_minilm().encode, explain=options.explain,
                                          task=route.task, route=route)

    # -- the second look --------------------------------------------------------------------------
    def _second_look_spec(self, plan: TurnPlan, options: TurnOptions) -> SecondLookSpec | None:
        """How this turn's judging member draws its second look; None when the turn is not judged, the member
        reads no second look (the shipped default) or the user turned it off."""
        loaded = self.components.verifier
        if not (plan.judge and options.second_look) or loaded is None:
            return None
        return self._judging(loaded, plan.route.task).second_look_spec(plan.route.task)

    def _draw_from_cache(self, spec: SecondLookSpec, gen: GeneratedAnswer) -> SampledAnswers | None:
        """K answers continuing from the answer's prompt cache, in one batch (no second prefill); None when the
        cache cannot be continued (a model whose cache is not a plain KV cache): the verdict then draws them
        from the judged question, as for an answer made elsewhere."""
        if gen.cache is None or gen.prompt_tokens < 2:
            return None
        try:
            return spec.draw(self.components.lm, gen.cache, gen.cached_tokens[: gen.prompt_tokens])
        except DataError:
            return None

    def _draw_for_text(self, plan: TurnPlan, text: str, spec: SecondLookSpec) -> tuple[SampledAnswers, tuple[float, ...]]:
        """The second look of an answer made elsewhere, drawn as the chat draws it for its own answer: the
        conversation as the model sees it and the answer read in one pass, K answers drawn from that cache with
        the spec's seed (``lm.sampling.sample_after_answer``), and the answer's own per-token log-probabilities."""
        from mlx_sdm.lm.sampling import sample_after_answer

        lm = self.components.lm
        answer_ids = lm.tokenizer.encode(text, add_special_tokens=False)[: spec.max_tokens]
        budget = lm.max_context - max(spec.max_tokens, len(answer_ids)) - 1
        prompt = fit_prompt(lm.tokenizer, plan.messages, budget, context=lm.max_context)
        return sample_after_answer(lm, list(prompt.ids), answer_ids, **spec.sampling())

    # -- steps ----------------------------------------------------------------------------------
    def _answer_once_more_if_repeated(self, request: TurnRequest, plan: TurnPlan, options: TurnOptions,
                                      stop: threading.Event, prefix: PrefixCache | None,
                                      on_prefill: PrefillCallback | None) -> Iterator[TokenPiece | GeneratedAnswer]:
        """The answer's stream; a follow-up never returns the previous answer verbatim. While the answer is still the
        previous assistant answer's beginning its pieces are held back (flushed once it departs from it); an answer
        that ends as that answer word for word is dropped unseen and asked once more, from a fresh prefill, with
        :data:`~mlx_sdm.lm.decoding.NO_REPEAT` (mlx-lm's repetition penalty over a context that holds it)."""
        previous = _previous_answer(request.messages)
        stream = self._without_loops(plan, options, stop, prefix, on_prefill)
        if not previous:
            yield from stream
            return
        held: list[TokenPiece] = []
        so_far: str | None = ""  # the answer's text while it is the previous answer's beginning (None: it departed)
        for item in stream:
            if isinstance(item, GeneratedAnswer):
                if item.cancelled or item.text.strip() != previous:
                    yield from held
                    yield item
                    return
                item.release()  # the repeat: its cache is dropped, the retry prefills afresh
                break
            if so_far is not None:
                so_far += item.text
                if not so_far.strip():  # leading blanks: nothing to compare yet
                    yield item
                    continue
                if previous.startswith(so_far.strip()):
                    held.append(item)
                    continue
                so_far = None
            yield from held
            held = []
            yield item
        yield from self._generate(plan, options, stop, None, on_prefill, decoding=NO_REPEAT)

    def _without_loops(self, plan: TurnPlan, options: TurnOptions, stop: threading.Event,
                       prefix: PrefixCache | None,
                       on_prefill: PrefillCallback | None) -> Iterator[TokenPiece | GeneratedAnswer]:
        """The answer's stream; a writing turn (:data:`~mlx_sdm.lm.decoding.WRITING`) whose answer still starts to loop
        is stopped as the loop starts and goes on once, before any pause. Its last ``LOOP_WINDOW`` pieces are held
        back while it streams; when the monitor's loop rule (:func:`loop_in`) trips on the text so far, generation
        stops at that token, the held-back pieces (the loop) are dropped unseen, and the answer goes on from the text
        already shown with :data:`~mlx_sdm.lm.decoding.LOOP_RETRY` (a stronger repetition penalty, another seed). The
        retry is not stopped again: if it loops too, the monitor pauses the turn as before. Other turns stream as
        they come (task and everyday turns keep greedy decoding: their verdicts are calibrated on it)."""
        if self._decoding(plan, options) is not WRITING:
            yield from self._generate(plan, options, stop, prefix, on_prefill)
            return
        looping = _LoopStop(stop)
        shown: list[TokenPiece] = []
        held: list[TokenPiece] = []
        text, pieces = "", 0
        for item in self._generate(plan, options, looping, prefix, on_prefill):
            if isinstance(item, GeneratedAnswer):
                if not looping.looped:
                    yield from held
                    yield item
                    return
                first = item
                break
            if looping.looped:
                continue  # the token generation stopped at (it belongs to the loop)
            held.append(item)
            text += item.text
            pieces += 1
            if pieces % LOOP_CHECK_EVERY == 0 and loop_in(text) is not None:
                looping.set()
                continue
            if len(held) > LOOP_WINDOW:
                shown.append(held.pop(0))
                yield shown[-1]
        first.release()  # the loop: its cache is dropped, the answer goes on from a fresh prefill
        shown_ids = [p.token_id for p in shown if p.token_id is not None]
        base = plan.prompt if plan.prompt is not None else fit_prompt(
            self.components.lm.tokenizer, plan.messages, self.components.lm.max_context - options.max_tokens,
            context=self.components.lm.max_context)
        going_on = replace(plan, prompt=replace(base, ids=tuple(base.ids) + tuple(shown_ids)))
        more = replace(options, max_tokens=max(1, options.max_tokens - len(shown_ids)))
        for item in self._generate(going_on, more, stop, None, on_prefill, decoding=LOOP_RETRY):
            if isinstance(item, GeneratedAnswer):
                yield _joined(shown, item, first)
                return
            yield item

    def _decoding(self, plan: TurnPlan, options: TurnOptions) -> Decoding | None:
        """:data:`~mlx_sdm.lm.decoding.WRITING` for a writing turn: one the router reads as having no checkable
        answer, or out of the loaded verifier's scope (nothing is judged, so no verdict is calibrated on greedy
        answers); None (greedy, or ``options.temperature``: a regenerated answer) for task and everyday turns."""
        if options.temperature > 0 or plan.judge or self.components.verifier is None:
            return None
        writing = plan.route.how in (RouteKind.NO_CHECKABLE_ANSWER, RouteKind.NOT_COVERED) and not plan.route.matched
        return WRITING if writing else None

    def _generate(self, plan: TurnPlan, options: TurnOptions, stop: threading.Event, prefix: PrefixCache | None,
                  on_prefill: PrefillCallback | None, *,
                  decoding: Decoding | None = None) -> Iterator[TokenPiece | GeneratedAnswer]:
        top = TopLogprobs(options.top_logprobs) if options.top_logprobs > 0 else None
        delimiter = self._delimiter_for(plan.route) if plan.judge else "end_of_turn"  # an unjudged answer: whole
        return stream_answer(
            self.components.lm, plan.messages, prompt=plan.prompt, max_tokens=options.max_tokens,
            temperature=options.temperature,
            head=plan.head, stop=stop, features=True, keep_cache=True, delimiter=delimiter,
            prefix=prefix if options.reuse_cache else None,
            stop_at_delimiter=options.stop_at_judged_unit and plan.judge,
            top_logprobs=top, on_prefill=on_prefill, decoding=decoding or self._decoding(plan, options),
        )

    def _monitor(self, monitor: TurnMonitor, plan: TurnPlan, gen: GeneratedAnswer, tool_calls: tuple[ToolCall, ...],
                 verdict: DocumentVerdict, options: TurnOptions, shared: Sequence[str] = ()) -> MonitorReading:
        """The session monitor's reading of the answer: P(True) and AUQ's System 2 samples read the answer's KV
        cache (``shared``: the answers the second look drew, which System 2 reads before drawing its own)."""
        lm, messages = self.components.lm, plan.messages
        p_true = sampler = None
        if options.enable_p_true:  # P(True) reuses the answer's KV cache: only the question is prefilled
            from mlx_sdm.monitor.online.p_true import PTrueScorer

            p_true = PTrueScorer(lm.model, lm.tokenizer, messages + [{"role": "assistant", "content": gen.text}],
                                 cache=gen.cache, cached_tokens=gen.cached_tokens, max_context=lm.max_context)
        if options.semantic_sampling:
            from mlx_sdm.turn.monitoring import ChatSampler

            sampler = ChatSampler(lm, messages, len(gen.token_ids), head=plan.head, cache=gen.cache,
                                  prompt_ids=gen.cached_tokens[: gen.prompt_tokens], shared=shared)
        return monitor.score_answer(answer=gen.text, tokens=gen.tokens, logprobs=gen.logprobs,
                                    tool_calls=tool_calls, p_true=p_true, verdict=verdict, sampler=sampler)

    def _reflect(self, plan: TurnPlan, answer: str, options: TurnOptions, stop: threading.Event,
                 prefix: PrefixCache | None = None) -> Iterator[TokenPiece | GeneratedAnswer]:
        """docs/monitoring.md, AUQ reflection: on HIGH the model states what it is NOT confident about.
        ``prefix``: the answer's KV cache (the turn's next prefix): the reflection request extends it, so only
        the request is prefilled, not the whole conversation again; the caller trims it back after."""
        ask = plan.messages + [{"role": "assistant", "content": answer}, {"role": "system", "content": REFLECTION_PROMPT}]
        delimiter = self._delimiter_for(plan.route) if plan.judge else "end_of_turn"
        return stream_answer(self.components.lm, ask, max_tokens=options.reflection_max_tokens,
                             temperature=options.temperature, head=None, stop=stop, phase="reflection",
                             features=False, keep_cache=prefix is not None, prefix=prefix,
                             delimiter=delimiter, keep_last=2)


#: Pieces of a writing turn's answer held back while it streams, so a loop that starts is dropped before it is
#: shown (the loop rule needs 3 repeats of at least 10 words and marks in all, or one word 6 times).
LOOP_WINDOW = 48
#: The loop rule reads the text so far every this many pieces (it costs milliseconds a call on a long answer; a loop
#: is still found well inside the held-back window).
LOOP_CHECK_EVERY = 4


def loop_in(text: str) -> DegenerateAnswer | None:
    """The monitor's loop rule (a group of words, one word or one character over and over) on an answer so far;
    None while it does not loop. The quotes-and-braces rule is left to the monitor: a writing turn may hold code."""
    found = degenerate_answer(text)
    return found if found is not None and found.kind != "quotes_braces" else None


class _LoopStop(threading.Event):
    """The stop a writing turn's generation reads: the user's stop key, or a loop found (:meth:`set`)."""

    def __init__(self, user: threading.Event | None):
        super().__init__()
        self.user = user

    @property
    def looped(self) -> bool:
        return super().is_set()

    def is_set(self) -> bool:
        return self.looped or (self.user is not None and self.user.is_set())


def _joined(shown: list[TokenPiece], rest: GeneratedAnswer, first: GeneratedAnswer) -> GeneratedAnswer:
    """One answer of the pieces shown before a loop was stopped and the answer that went on from them."""
    pieces = [p for p in shown if p.token_id is not None]
    return replace(rest, text="".join(p.text for p in shown) + rest.text, tokens=[p.text for p in pieces] + rest.tokens,
                   token_ids=[int(p.token_id) for p in pieces if p.token_id is not None] + rest.token_ids,
                   logprobs=[float(p.logprob or 0.0) for p in pieces] + rest.logprobs,
                   prompt_tokens=first.prompt_tokens, reused_tokens=first.reused_tokens, prompt_fit=first.prompt_fit,
                   judged_tokens=len(pieces) + rest.judged_tokens)


def _previous_answer(messages: Sequence[ChatMessage]) -> str:
    """The last assistant answer before this turn's question, stripped ("" on a first turn)."""
    for message in reversed(list(messages)[:-1]):
        if message.get("role") == "assistant":
            return str(message.get("content") or "").strip()
    return ""


def _unjudged_task(route: TaskRoute) -> bool:
    """A question of one of the model's fine-tuned tasks that the loaded verifier does not cover (``_route``)."""
    return route.matched and route.kind is RouteKind.NOT_COVERED
