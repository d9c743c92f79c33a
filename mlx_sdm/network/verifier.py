"""The document-level verifier: an SDM estimator over LM document features (docs/method.md § 15.3).

    verifier = DocumentVerifier.fit(lm, train_docs, calibration_docs, FitConfig(...))
    verdict = verifier.verify_features(result.features)      # after generate_with_features
    verdict = verifier.verify_text(lm, prompt, completion)   # force-decoded
    judged = verifier.judge(features)                         # DocumentVerdict: verified / not verified / out of scope
    spec = verifier.second_look_spec(task)                    # a second-look member's SecondLookSpec, else None
    judged = verifier.judge_second_look(features, look, embed, task=task)   # network/second_look.py
    verifier.save("weights/smollm2-fever"); DocumentVerifier.load(dir, expect_fingerprint=lm.fingerprint)

A verifier records the fingerprint of the model whose hidden states it was built on, and the
feature recipe (delimiter rule, system prompt); loading it for another model raises
:class:`~mlx_sdm.errors.ModelMismatchError`.

Folder layout (written atomically as a whole): ``verifier.json`` (fingerprint, recipe, info and
optionally ``tasks``: what it covers) + ``estimator/`` (the SDM estimator's own folder: safetensors +
manifest.json + support.json). Building and using verifiers from commands (progress bars, caches,
text rows) is in :mod:`mlx_sdm.usecases.verifiers`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from mlx_sdm.atomic import atomic_directory, recover_directory
from mlx_sdm.calibration.data import LabelledSet
from mlx_sdm.calibration.fit_config import FitConfig
from mlx_sdm.calibration.estimator import SDMEstimator
from mlx_sdm.calibration.row_verdict import Verdict
from mlx_sdm.errors import ArtifactError, DataError, ModelMismatchError
from mlx_sdm.resources import default_verifier_dir, resolve_artifact
from mlx_sdm.lm.features import DELIMITER_JSON_CLOSE, DocumentFeatures, force_decode_batch
from mlx_sdm.network.encoding import VerificationDocument
from mlx_sdm.network.label_member import LABEL_ANSWERS_KEY, LabelAnswers
from mlx_sdm.network.lean import ANY_TASK, Lean, load_leans, save_leans
from mlx_sdm.network.verdict import DocumentVerdict
from mlx_sdm.network.coverage import (
    MEMBERS_DIR,
    RouteKind,
    TaskInstruction,
    TaskRoute,
    VerifierCoverage,
    match_instruction,
    read_coverage,
)
from mlx_sdm.network.second_look import SECOND_LOOK_KEY, SECOND_LOOK_LAYOUT, Embed, SecondLook, SecondLookSpec, \
    second_look_inputs
from mlx_sdm.network.question_router import NO_ANSWER_KIND, OPEN_KIND, QuestionRouter
from mlx_sdm.network.task_asking import document_label, is_bare_request, payload_of, task_question

VERIFIER_FORMAT_VERSION = 1
VERIFIER_MANIFEST = "verifier.json"
#: verifier.json: members stored in another shipped verifier's folder (see DocumentVerifier.member_refs)
MEMBER_REFS_KEY = "member_refs"
#: verifier.json: the shipped verifier this one extends (see DocumentVerifier.base_ref): its estimator, recipe,
#: tasks, leans and members judge every task this one has no member of
BASE_REF_KEY = "base_ref"
ESTIMATOR_DIR = "estimator"
#: Keys of a model fingerprint that must agree (see mlx_sdm.lm.loading.model_fingerprint).
FINGERPRINT_KEYS = ("architecture", "hidden_size", "vocab_size", "num_layers", "head_sha256")
#: Where the shipped default verifier lives (mlx_sdm.resources: package data, then the checkout's weights/).
DEFAULT_VERIFIER_DIR = default_verifier_dir()


def check_fingerprint(expected: dict[str, Any], found: dict[str, Any], *, where: str) -> None:
    """ModelMismatchError naming the first differing key."""
    for key in FINGERPRINT_KEYS:
        if expected.get(key) != found.get(key):
            raise ModelMismatchError(
                f"{where}: this verifier was built on model {expected.get('name', '?')!r} "
                f"({key}={expected.get(key)!r}) but the loaded model has {key}={found.get(key)!r}. "
                "Load the model it was built on, or build a verifier for this model with `mlx-sdm train`."
            )


def document_text(doc: VerificationDocument) -> str:
    """Short text shown for an exemplar."""
    source = doc.document if doc.document is not None else doc.prompt
    return f"{source.strip()} => {doc.completion.strip()}"


@dataclass(frozen=True)
class FeatureRecipe:
    delimiter: str = DELIMITER_JSON_CLOSE
    system: str | None = None  # system prompt used for every document unless the document has its own
    #: (prompt prefix, system prompt) per task of a multi-task verifier (mlx-sdm build-verifier): a prompt
    #: that starts with a task's instruction is generated (and its features taken) under that task's system.
    task_systems: tuple[tuple[str, str | None], ...] = ()
    #: the task name of each ``task_systems`` entry, in the same order (verifier.json "task_names"; older
    #: manifests: read from the "tasks" whose example prompt starts with the entry's prefix).
    task_names: tuple[str | None, ...] = ()

    def route(self, prompt: Any) -> TaskRoute:
        """The system prompt to generate ``prompt`` (one turn's user message) under, the task instruction
        it starts with (:func:`match_instruction`) and the task's name when this recipe
        routes between several tasks (one task: no name, ``task`` None)."""
        index = match_instruction([prefix for prefix, _ in self.task_systems], prompt)
        if index is None:
            return TaskRoute(self.system)
        prefix, system = self.task_systems[index]
        name = self.task_names[index] if index < len(self.task_names) else None
        return TaskRoute(system, name if len(self.task_systems) > 1 else None, prefix)

    def task_instructions(self) -> tuple[TaskInstruction, ...]:
        """The tasks this recipe routes to (what a head trained against this verifier records)."""
        names = list(self.task_names) + [None] * (len(self.task_systems) - len(self.task_names))
        return tuple(TaskInstruction(prefix, system, name) for (prefix, system), name in zip(self.task_systems, names))

    @property
    def routes_tasks(self) -> bool:
        """The recipe knows its tasks' instructions: a question that starts none of them is not one of its tasks."""
        return bool(self.task_systems)

    def system_for(self, prompt: Any) -> str | None:
        """The system prompt to generate ``prompt`` (a user message) under, so its features match the build."""
        return self.route(prompt).system


def task_names_for(task_systems: Sequence[Sequence[Any]], tasks: Sequence[Any]) -> tuple[str | None, ...]:
    """The name of each (prefix, system) entry's task: the listed task whose example prompt starts with
    the prefix (None where no listed task does)."""
    listed = [(str(t.get("name")), str(t.get("example_prompt") or "")) for t in tasks
              if isinstance(t, dict) and t.get("name")]
    return tuple(next((name for name, example in listed if prefix and example.strip().startswith(prefix)), None)
                 for prefix, *_ in task_systems)


def document_features(lm, documents: Sequence[VerificationDocument], *, delimiter: str,
                      progress: Callable[[int], None] | None = None, max_batch_tokens: int = 2048) -> np.ndarray:
    """[N, 2·hidden] force-decoded features; documents with different system prompts are batched apart."""
    out = np.zeros((len(documents), 2 * lm.hidden_size), dtype=np.float32)
    by_system: dict[str | None, list[int]] = {}
    for i, doc in enumerate(documents):
        by_system.setdefault(doc.system, []).append(i)
    for system, index in by_system.items():
        feats = force_decode_batch(
            lm, [(documents[i].prompt, documents[i].completion) for i in index], delimiter=delimiter, system=system,
            max_batch_tokens=max_batch_tokens, progress=progress,
        )
        for i, f in zip(index, feats):
            out[i] = f.vector
    return out


def labelled_set(documents: Sequence[VerificationDocument], features: np.ndarray) -> LabelledSet:
    labels = np.array([d.label for d in documents], dtype=np.int64)
    if np.any((labels != 0) & (labels != 1)):
        raise DataError("every training document needs label 0 or 1", field="label")
    return LabelledSet([d.id for d in documents], features, labels, [document_text(d) for d in documents])


class DocumentVerifier:
    """SDMEstimator + the model fingerprint and feature recipe it was built with; optionally member
    verifiers for tasks read with other features (``members``: the open-question verifier) and the
    question router that sends a question to what the verifier covers (``router``)."""

    def __init__(self, estimator: SDMEstimator, model_fingerprint: dict[str, Any], recipe: FeatureRecipe | None = None,
                 info: dict[str, Any] | None = None, tasks: list[dict[str, Any]] | None = None,
                 members: dict[str, "DocumentVerifier"] | None = None, router: QuestionRouter | None = None,
                 leans: dict[str, dict[int, Lean]] | None = None, second_look: SecondLookSpec | None = None,
                 labels: LabelAnswers | None = None):
        self.estimator = estimator
        self.model_fingerprint = dict(model_fingerprint)
        self.info = dict(info or {})
        self.tasks = list(tasks or [])  # verifier.json "tasks": [{"name", "description", "example_prompt"}]
        recipe = recipe or FeatureRecipe()
        if recipe.task_systems and not recipe.task_names and self.tasks:  # an older manifest: names from "tasks"
            recipe = replace(recipe, task_names=task_names_for(recipe.task_systems, self.tasks))
        self.recipe = recipe
        self.members = dict(members or {})
        self.router = router
        #: per task (ANY_TASK for one task), how much its lean toward right (1) and wrong (0) is worth (network/lean.py)
        self.leans = dict(leans or {})
        #: a second-look member's spec (network/second_look.py): its estimator reads [agreement; states]
        self.second_look = second_look
        #: a label member's answer values (network/label_member.py): its estimator predicts the task's value and an
        #: answer is judged by whether the admitted prediction is that answer; None: it judges answers right or wrong
        self.labels = labels
        #: members kept where another shipped verifier keeps them (name -> its folder under weights/, e.g.
        #: "smollm2-suite/members/open_questions"): saved as that reference, not a second copy
        self.member_refs: dict[str, str] = {}
        #: the shipped verifier (its folder under weights/, e.g. "smollm2-suite") this one extends: its top level
        #: and its members come from there and are saved as that reference; this one's own members judge their
        #: tasks in its place (a fine-tuned folder's tasks over the suite that judges the plain model's answers)
        self.base_ref: str | None = None
        self.base_members: frozenset[str] = frozenset()

    def extending(self, base_ref: str, members: dict[str, "DocumentVerifier"], info: dict[str, Any]) -> "DocumentVerifier":
        """This verifier (a shipped one, loaded from ``base_ref``) extended by ``members``, which judge their tasks
        in place of its top level or its members of the same name (a member's task this one does not route is
        routed by its instruction too); saved as the reference plus those members."""
        known = set(self.recipe.task_names or ())
        added = [(pair, name) for m in members.values()
                 for pair, name in zip(m.recipe.task_systems, m.recipe.task_names or ()) if name not in known]
        recipe = replace(self.recipe, task_systems=self.recipe.task_systems + tuple(pair for pair, _ in added),
                         task_names=tuple(self.recipe.task_names or ()) + tuple(name for _, name in added))
        tasks = self.tasks + [t for m in members.values() for t in m.tasks if t.get("name") not in known]
        joined = DocumentVerifier(self.estimator, self.model_fingerprint, recipe, info, tasks,
                                  {**self.members, **members}, self.router, self.leans, self.second_look, self.labels)
        joined.base_ref = base_ref
        joined.base_members = frozenset(n for n in self.members if n not in members)
        return joined

    @property
    def judges_open_questions(self) -> bool:
        """It judges everyday open questions: a member does, or it was built on them itself."""
        return OPEN_KIND in self.members or any(t.get("name") == OPEN_KIND for t in self.tasks)

    def route(self, prompt: Any, previous: str | None = None) -> TaskRoute:
        """Where a question (this turn's user message) goes (docs/verifiers.md, "Routing by meaning"): a question
        that starts one of the task instructions goes to that task; else the question router's reading of it
        (``network/question_router.py``; ``previous``: the conversation's previous user message, which a
        follow-up is read with): a task of this verifier asked in a person's words (the route's ``asked``: the
        task's own instruction with the person's payload, ``network/task_asking.py``), an open question (when
        it judges them), or no checkable answer; without a router, none of its tasks."""
        recipe = self.recipe
        route = recipe.route(prompt)
        if route.matched or not isinstance(prompt, str):
            return route
        if self.router is None:
            return TaskRoute(None, OPEN_KIND, kind=RouteKind.OPEN_QUESTION) if self._open_only else route
        guess = self.router.read(prompt, previous)
        if guess.kind == NO_ANSWER_KIND:
            return TaskRoute(route.system, kind=RouteKind.NO_CHECKABLE_ANSWER, probability=guess.probability)
        if guess.kind == OPEN_KIND:
            if not self.judges_open_questions:
                return TaskRoute(route.system, probability=guess.probability)
            return TaskRoute(None, OPEN_KIND, kind=RouteKind.OPEN_QUESTION, probability=guess.probability,
                             asked=guess.read_as)
        for (prefix, system), name in zip(recipe.task_systems, recipe.task_names):
            if name == guess.kind:
                label = self._document_label(name, prefix)
                if label is not None and is_bare_request(prompt):  # "What is this article about?" with no article
                    return TaskRoute(route.system, kind=RouteKind.NO_CHECKABLE_ANSWER, probability=guess.probability)
                return TaskRoute(system, name if len(recipe.task_systems) > 1 else None, prefix,
                                 kind=RouteKind.MEANING, probability=guess.probability,
                                 asked=task_question(prefix, label, payload_of(prompt)))
        return TaskRoute(route.system, probability=guess.probability)  # a task this verifier does not cover

    def _document_label(self, name: str | None, instruction: str) -> str | None:
        """The label the task's prompts put before the payload ("ARTICLE"), from its listed example prompt."""
        examples = [str(t.get("example_prompt") or "") for t in self.tasks if t.get("name") == name]
        return next((label for label in (document_label(instruction, e) for e in examples) if label), None)

    @property
    def _open_only(self) -> bool:
        return not self.recipe.task_systems and self.judges_open_questions

    def member_for(self, task: str | None) -> "DocumentVerifier":
        """The verifier whose estimator judges questions routed to ``task`` (a member's, else this one)."""
        return self.members.get(task, self) if task is not None else self

    def estimator_for(self, task: str | None) -> SDMEstimator:
        return self.member_for(task).estimator

    def support_label(self, task: str | None, right: int, text: str | None) -> int | None:
        """The class a reviewed answer routed to ``task`` joins the judging member's support set with: ``right``
        (1: accepted or corrected, 0: rejected) for a member that judges answers, the answer's value for a label
        member (None: a rejected answer that says not which value is right joins nothing)."""
        labels = self.member_for(task).labels
        return right if labels is None else labels.support_class(right, text)

    def recipe_for(self, task: str | None) -> FeatureRecipe:
        """The feature recipe of the verifier that judges ``task`` (its delimiter ends the judged answer)."""
        return self.member_for(task).recipe

    @property
    def coverage(self) -> VerifierCoverage:
        """What this verifier covers (its tasks and its members'; unknown when its manifest does not say)."""
        names = {t.get("name") for t in self.tasks}
        tasks = self.tasks + [t for m in self.members.values() for t in m.tasks if t.get("name") not in names]
        return read_coverage({"tasks": tasks, "info": self.info} if tasks else {"info": self.info})

    # ------------------------------------------------------------------------------------- build
    @classmethod
    def fit_features(cls, lm_fingerprint: dict[str, Any], train: LabelledSet, calibration: LabelledSet,
                     config: FitConfig | None = None, *, recipe: FeatureRecipe | None = None,
                     source: dict | None = None, progress: Any = None,
                     second_look: SecondLookSpec | None = None) -> "DocumentVerifier":
        """Alg. 1–3 on features already taken; ``second_look``: the rows are :func:`second_look_inputs`."""
        expected = _input_dim(lm_fingerprint, second_look)
        if train.dim != expected:
            raise DataError(f"features have width {train.dim}; this model's document features have width {expected}",
                            field="embedding")
        estimator = SDMEstimator.fit(train, calibration, config, source=source, progress=progress)
        return cls(estimator, lm_fingerprint, recipe, second_look=second_look)

    @classmethod
    def fit(cls, lm, train: Sequence[VerificationDocument], calibration: Sequence[VerificationDocument],
            config: FitConfig | None = None, *, recipe: FeatureRecipe | None = None, source: dict | None = None,
            progress: Any = None) -> "DocumentVerifier":
        """Force-decode both sets with ``lm`` and fit the estimator (Alg. 1–3) on their features."""
        systems = {d.system for d in list(train) + list(calibration)}
        recipe = recipe or FeatureRecipe(system=systems.pop() if len(systems) == 1 else None)
        tr = labelled_set(train, document_features(lm, train, delimiter=recipe.delimiter))
        ca = labelled_set(calibration, document_features(lm, calibration, delimiter=recipe.delimiter))
        fingerprint = dict(lm.fingerprint, name=lm.name)
        return cls.fit_features(fingerprint, tr, ca, config, recipe=recipe, source=source, progress=progress)

    # ------------------------------------------------------------------------------------ verify
    def check_model(self, lm, *, where: str = "verifier") -> None:
        check_fingerprint(self.model_fingerprint, lm.fingerprint, where=where)

    def verify_features(self, features: np.ndarray | DocumentFeatures, explain: int = 5, *,
                        answer: str | None = None) -> Verdict:
        """The estimator's verdict on one answer's features; a label member reads it against ``answer`` (the answer's
        text: which of the task's values it gives) so the verdict is on the answer either way."""
        vector = features.vector if isinstance(features, DocumentFeatures) else np.asarray(features, dtype=np.float32)
        verdict = self.estimator.predict(vector.reshape(1, -1), explain=explain)[0]
        return verdict if self.labels is None else self.labels.answer_view(verdict, answer)

    def judge(self, features: np.ndarray | DocumentFeatures, explain: int = 5, *, task: str | None = None,
              route: TaskRoute | None = None, answer: str | None = None) -> DocumentVerdict:
        """The verdict with its user-facing state (verified / not verified / out of scope); ``task``: the
        task of this verifier the question was routed to (:meth:`route`), None when unrouted; ``route``:
        how it was routed (the verdict's sentence says so); ``answer``: the answer's text (a label member reads
        which value it gives)."""
        judge = self.member_for(task)
        if judge.second_look is not None:
            raise DataError(f"the {task or 'verifier'} member judges from a second look (K drawn answers beside the "
                            "answer): call judge_second_look with them", field="second_look")
        return self.document_verdict(judge.verify_features(features, explain=explain, answer=answer), task=task,
                                     route=route)

    def second_look_spec(self, task: str | None) -> SecondLookSpec | None:
        """How the verifier judging ``task`` wants its second look drawn (K, temperature, tokens, seed); None when
        it judges from the answer's own states alone (every verifier without a second-look member)."""
        return self.member_for(task).second_look

    def judge_second_look(self, features: np.ndarray | DocumentFeatures, look: SecondLook, embed: Embed,
                          explain: int = 5, *, task: str | None, route: TaskRoute | None = None) -> DocumentVerdict:
        """The verdict of an answer routed to ``task`` from its second look (network/second_look.py): the answer's
        state features ``[mean(h); h_delimiter]``, ``look`` (:meth:`SecondLookSpec.look` of the answers drawn
        with :meth:`second_look_spec`'s settings) and ``embed`` (MiniLM's unit-norm sentence embeddings)."""
        judge = self.member_for(task)
        if judge.second_look is None:
            raise DataError(f"the verifier judging {task or 'this answer'} reads no second look; call judge",
                            field="second_look")
        states = features.vector if isinstance(features, DocumentFeatures) else np.asarray(features, np.float32)
        row = second_look_inputs([look], states.reshape(1, -1), embed)[0]
        return self.document_verdict(judge.verify_features(row, explain=explain), task=task, route=route)

    def document_verdict(self, verdict: Verdict, *, task: str | None, route: TaskRoute | None = None) -> DocumentVerdict:
        """The estimator's verdict of an answer routed to ``task`` as the user-facing :class:`DocumentVerdict`: the
        judging member's α′, whether it admits anything, and how much its lean is worth (every verdict is wrapped here)."""
        judge = self.member_for(task)
        return DocumentVerdict(verdict, alpha=judge.estimator.alpha, coverage=self.coverage, task=task, route=route,
                               admits_nothing=judge.estimator.admits_nothing,
                               lean=judge.lean_for(task, int(verdict.prediction)))

    def lean_for(self, task: str | None, prediction: int) -> Lean | None:
        """How much this verifier's lean toward ``prediction`` is worth on ``task`` (None: never measured)."""
        by_class = self.leans.get(task or ANY_TASK) or self.leans.get(ANY_TASK) or {}
        return by_class.get(int(prediction))

    def verify_batch(self, features: np.ndarray, explain: int = 0) -> list[Verdict]:
        return self.estimator.predict(np.asarray(features, dtype=np.float32), explain=explain)

    def verify_text(self, lm, prompt: Any, completion: str, *, system: str | None = None, explain: int = 5) -> Verdict:
        """Force-decode (prompt, completion) with ``lm`` (checked against the fingerprint) and verify."""
        from mlx_sdm.lm.features import force_decode_document

        self.check_model(lm)
        feats = force_decode_document(lm, prompt, completion, delimiter=self.recipe.delimiter,
                                      system=system if system is not None else self.recipe.system)
        return self.verify_features(feats, explain=explain)

    # --------------------------------------------------------------------------------- save/load
    def manifest(self) -> dict[str, Any]:
        return {
            "format_version": VERIFIER_FORMAT_VERSION,
            "kind": "document_verifier",
            "model_fingerprint": self.model_fingerprint,
            "feature": {"delimiter": self.recipe.delimiter, "system": self.recipe.system,
                        "task_systems": [list(pair) for pair in self.recipe.task_systems],
                        "task_names": list(self.recipe.task_names or task_names_for(self.recipe.task_systems, self.tasks)),
                        "dim": self.estimator.input_dim,
                        "layout": SECOND_LOOK_LAYOUT if self.second_look else "[mean(h_0..h_k); h_k], h = final RMSNorm output"},
            "info": self.info,
            **({SECOND_LOOK_KEY: self.second_look.to_dict()} if self.second_look else {}),
            **({LABEL_ANSWERS_KEY: self.labels.to_dict()} if self.labels else {}),
            **({"tasks": self.tasks} if self.tasks else {}),
            **({MEMBER_REFS_KEY: dict(self.member_refs)} if self.member_refs else {}),
        }

    def _extension_manifest(self) -> dict[str, Any]:
        """verifier.json of a verifier that extends a shipped one: the reference, its own info and member refs."""
        return {"format_version": VERIFIER_FORMAT_VERSION, "kind": "document_verifier",
                "model_fingerprint": self.model_fingerprint, "info": self.info, BASE_REF_KEY: self.base_ref,
                **({MEMBER_REFS_KEY: dict(self.member_refs)} if self.member_refs else {})}

    def save(self, directory: str | Path) -> None:
        with atomic_directory(directory) as tmp:
            if self.base_ref is None:
                self.estimator.save(tmp / ESTIMATOR_DIR)
            for name, member in self.members.items():
                if name not in self.member_refs and name not in self.base_members:
                    member.save(tmp / MEMBERS_DIR / name)
            if self.leans and self.base_ref is None:
                save_leans(tmp, self.leans, source=str(self.info.get("built_by", "")))
            manifest = self.manifest() if self.base_ref is None else self._extension_manifest()
            (tmp / VERIFIER_MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True), encoding="utf-8")
            tmp.chmod(0o755)
            (tmp / VERIFIER_MANIFEST).chmod(0o644)

    @classmethod
    def load(cls, directory: str | Path, expect_fingerprint: dict[str, Any] | None = None) -> "DocumentVerifier":
        directory = resolve_artifact(directory)
        recover_directory(directory)
        path = directory / VERIFIER_MANIFEST
        if not path.is_file():
            raise ArtifactError(f"{directory}: no {VERIFIER_MANIFEST}; not a document verifier folder "
                                "(build one with `mlx-sdm train` on prompt/completion rows)")
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ArtifactError(f"{path}: corrupt manifest ({exc.msg})") from exc
        if manifest.get("format_version") != VERIFIER_FORMAT_VERSION:
            raise ArtifactError(f"{path}: format_version {manifest.get('format_version')!r}; this mlx-sdm reads "
                                f"{VERIFIER_FORMAT_VERSION}. Rebuild it with `mlx-sdm train`.")
        fingerprint = manifest["model_fingerprint"]
        if expect_fingerprint is not None:
            check_fingerprint(fingerprint, expect_fingerprint, where=str(directory))
        if manifest.get(BASE_REF_KEY):
            return cls._load_extension(directory, manifest, expect_fingerprint)
        second_look = SecondLookSpec.from_dict(manifest[SECOND_LOOK_KEY], str(path)) if SECOND_LOOK_KEY in manifest \
            else None
        estimator = SDMEstimator.load(directory / ESTIMATOR_DIR, expect_input_dim=_input_dim(fingerprint, second_look))
        feature = manifest.get("feature", {})
        task_systems = tuple((str(p), s) for p, s in feature.get("task_systems", []))
        tasks = manifest.get("tasks") if isinstance(manifest.get("tasks"), list) else None
        names = feature.get("task_names")
        names = tuple(names) if isinstance(names, list) and len(names) == len(task_systems) else \
            task_names_for(task_systems, tasks or [])
        recipe = FeatureRecipe(delimiter=feature.get("delimiter", DELIMITER_JSON_CLOSE), system=feature.get("system"),
                               task_systems=task_systems, task_names=names)
        members = {p.name: cls.load(p, expect_fingerprint) for p in sorted((directory / MEMBERS_DIR).glob("*"))
                   if (p / VERIFIER_MANIFEST).is_file()}
        refs = manifest.get(MEMBER_REFS_KEY) or {}
        for name, where in refs.items():
            shared = resolve_artifact(where)
            if not (shared / VERIFIER_MANIFEST).is_file():
                raise ArtifactError(f"{path}: member {name!r} is kept at {where}, which is not installed; reinstall "
                                    "mlx-sdm (the shipped weights) or rebuild this verifier")
            members[name] = cls.load(shared, expect_fingerprint)
        labels = LabelAnswers.from_dict(manifest[LABEL_ANSWERS_KEY], str(path)) if LABEL_ANSWERS_KEY in manifest \
            else None
        verifier = cls(estimator, fingerprint, recipe, manifest.get("info"), tasks, members, leans=load_leans(directory),
                       second_look=second_look, labels=labels)
        verifier.member_refs = {str(k): str(v) for k, v in refs.items()}
        verifier.router = default_router_for(verifier)
        return verifier

    @classmethod
    def _load_extension(cls, directory: Path, manifest: dict[str, Any],
                        expect_fingerprint: dict[str, Any] | None) -> "DocumentVerifier":
        """A verifier that extends a shipped one (``base_ref``): that one loaded, this folder's members over it."""
        where = str(manifest[BASE_REF_KEY])
        shared = resolve_artifact(where)
        if not (shared / VERIFIER_MANIFEST).is_file():
            raise ArtifactError(f"{directory / VERIFIER_MANIFEST}: it extends the verifier at {where}, which is not "
                                "installed; reinstall mlx-sdm (the shipped weights) or rebuild this folder")
        base = cls.load(shared, expect_fingerprint or manifest["model_fingerprint"])
        members = {p.name: cls.load(p, expect_fingerprint) for p in sorted((directory / MEMBERS_DIR).glob("*"))
                   if (p / VERIFIER_MANIFEST).is_file()}
        for name, ref in (manifest.get(MEMBER_REFS_KEY) or {}).items():
            members[name] = cls.load(resolve_artifact(ref), expect_fingerprint)
        verifier = base.extending(where, members, manifest.get("info") or {})
        verifier.member_refs = {str(k): str(v) for k, v in (manifest.get(MEMBER_REFS_KEY) or {}).items()}
        return verifier


def _input_dim(fingerprint: dict[str, Any], second_look: SecondLookSpec | None) -> int:
    """The estimator input width of a verifier on this model: its document features ``[mean(h); h_k]``, with a
    second look's agreement features before them."""
    states = 2 * int(fingerprint["hidden_size"])
    return second_look.input_dim(states) if second_look is not None else states


def default_router_for(verifier: DocumentVerifier) -> QuestionRouter | None:
    """The shipped question router (``weights/question-router``) for a verifier that covers one of the kinds it
    reads (a suite task or open questions); None for others (they route by their instructions alone)."""
    from mlx_sdm.resources import default_router_dir

    folder = default_router_dir()
    if folder is None or not (folder / "router.json").is_file():
        return None
    router = QuestionRouter.load(folder)
    covered = {t.name for t in verifier.coverage.tasks} | set(verifier.recipe.task_names or ())
    return router if covered & set(router.labels) else None
