"""SDM-network fine-tuning of the positive vocabulary head (Alg. 4, spec § 15.4–15.6).

The loop has mlx-lm's trainer shape (``mlx_lm.tuner.trainer.train``): a dataclass of arguments,
an injectable loss and batch iterator, ``nn.value_and_grad`` + ``mx.compile`` over the module and
optimizer state, gradients averaged with ``mlx.nn.average_gradients`` across ``mlx.launch`` ranks,
and reports through mlx-lm's ``TrainingCallback``. Around it, Alg. 4:

    (q, d) of every y = 1 training document ← greedy generation + verifier       (cached)
    best ← admitted count of the untuned model on the calibration set             (reference)
    for each epoch:
        Eq. 32 over the shuffled target tokens of the y = 1 documents, β: 0 → 0.1
        regenerate the training documents → new (q, d)
        regenerate the calibration documents → admitted count
                 (ŷ = 1, admitted at p_lower ≥ α′, parsed task answer correct)
        keep W_pos if the count strictly beats the best
        checkpoint (atomic)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Protocol, Sequence

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_map, tree_unflatten
from mlx_lm.tuner.callbacks import TrainingCallback

from mlx_sdm.calibration.constants import ADAM_BETAS, ADAM_EPS, SOFTMAX_D, SOFTMAX_Q
from mlx_sdm.errors import DataError
from mlx_sdm.network.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from mlx_sdm.network.data import FinetuneDocument, TokenTargets, build_token_targets, documents_hash
from mlx_sdm.network.distributed import gather_rows, shard, shard_indices, unshard_rows
from mlx_sdm.network.heads import VocabularyHeads
from mlx_sdm.network.loss import BETA_MAX, BETA_MIN, beta_for_batch, sdm_loss_from_terms, sdm_token_terms

#: Paper values (§ 15.4, § 18): Adam lr 1e-5, 50-token mini-batches, 5 epochs, seed 235.
PAPER_HEAD_LEARNING_RATE = 1e-5
PAPER_TOKEN_BATCH_SIZE = 50
PAPER_HEAD_EPOCHS = 5
PAPER_HEAD_SEED = 235


@dataclass
class FinetuneArgs:
    epochs: int = field(default=PAPER_HEAD_EPOCHS, metadata={"help": "Epochs over the target tokens (Alg. 4)."})
    batch_size: int = field(default=PAPER_TOKEN_BATCH_SIZE, metadata={"help": "Target tokens per mini-batch (global)."})
    learning_rate: float = field(default=PAPER_HEAD_LEARNING_RATE, metadata={"help": "Adam learning rate."})
    seed: int = field(default=PAPER_HEAD_SEED, metadata={"help": "Seed of the token shuffling."})
    beta_min: float = BETA_MIN
    beta_max: float = BETA_MAX
    warmup_epochs: int = field(
        default=0,
        metadata={"help": "First epochs with q = e-2, d = 1 (plain joint softmax) instead of generation-based q, d. "
                  "The paper uses 0; a model whose untuned answers are all out of distribution (d = 0) needs 1."},
    )
    steps_per_report: int = field(default=10, metadata={"help": "Mini-batches between loss reports."})
    checkpoint_path: str | None = field(default=None, metadata={"help": "Folder of the per-epoch checkpoint."})
    resume: bool = field(default=False, metadata={"help": "Continue from the checkpoint if there is one."})
    compile: bool = True
    progress: bool = True


@dataclass
class Outcome:
    """What Alg. 4 needs from one generated completion."""

    prediction: int  # verifier ŷ
    admitted: bool  # p_lower ≥ α′ (Eq. 28)
    q: float
    d: float
    correct: bool  # the task answer parsed from the generated JSON equals the task label
    text: str = ""


class Scorer(Protocol):
    """Generates for documents with a decoding head and verifies the completions (this rank's share)."""

    def __call__(
        self, documents: Sequence[FinetuneDocument], head: Callable[[mx.array], mx.array], purpose: str = "calibration"
    ) -> list[Outcome]: ...


class LMScorer:
    """The default scorer (§ 15.5): greedy decoding over the joint heads through the LM layer's
    ``generate_with_features`` (argmax mod |V|, the document feature vector from the same pass),
    then the document verifier (``verify(features) -> Verdict``, e.g. ``DocumentVerifier.verify_features``).

    For training documents (``purpose="training"``) q and d come from ``training_qd(features) ->
    (ŷ, q, d)`` when given: q without self-exclusion and not flip-adjusted, d from the *training*
    distance eCDFs, as the reference does for the next-token loss (§ 15.5, § 20 item 13)."""

    def __init__(self, lm, verify: Callable[[Any], Any], *, training_qd: Callable[[Any], tuple[int, float, float]] | None = None,
                 delimiter: str = "json_close", system: str | None = None, progress=None):
        self.lm, self.verify, self.training_qd = lm, verify, training_qd
        self.delimiter, self.system, self.progress = delimiter, system, progress

    @classmethod
    def from_verifier(cls, lm, verifier, progress=None) -> "LMScorer":
        """Scorer for a :class:`~mlx_sdm.network.verifier.DocumentVerifier`; refuses one built on another model."""
        verifier.check_model(lm)

        def training_qd(features):
            vector = np.asarray(features.vector, dtype=np.float32)[None, :]
            qd = verifier.estimator.q_and_d(vector, distance_cdfs="training")
            return int(qd["prediction"][0]), float(qd["q"][0]), float(qd["d"][0])

        return cls(lm, lambda features: verifier.verify_features(features, explain=0), training_qd=training_qd,
                   delimiter=verifier.recipe.delimiter, system=verifier.recipe.system, progress=progress)

    def __call__(self, documents, head, purpose: str = "calibration"):
        from mlx_sdm.lm.generation import GenerationConfig, generate_with_features

        outcomes = []
        iterator = self.progress(documents) if self.progress else documents
        for doc in iterator:
            config = GenerationConfig(
                max_tokens=doc.max_generation_tokens,
                delimiter=self.delimiter,
                system=doc.system if doc.system is not None else self.system,
            )
            result = generate_with_features(self.lm, doc.prompt, config, head=head)
            answer = doc.task_answer(result.text)
            if purpose == "training" and self.training_qd is not None:
                prediction, q, d = self.training_qd(result.features)
                verdict = Outcome(prediction=prediction, admitted=False, q=q, d=d, correct=False)
            else:
                verdict = self.verify(result.features)
            outcomes.append(
                Outcome(
                    prediction=int(verdict.prediction),
                    admitted=bool(verdict.admitted),
                    q=float(verdict.q),
                    d=float(verdict.d),
                    correct=answer is not None and answer == doc.task_label,
                    text=result.text,
                )
            )
        return outcomes


class FinetuneCallback(TrainingCallback):
    """mlx-lm's callback, plus a report after each epoch of Alg. 4."""

    def on_epoch_report(self, epoch_info: dict) -> None:
        pass


def admitted_count(outcomes: Sequence[Outcome]) -> int:
    """Alg. 4's metric: ŷ = 1, admitted, and the parsed task answer equals the task label."""
    return sum(1 for out in outcomes if out.prediction == 1 and out.admitted and out.correct)


def score_all(scorer: Scorer, documents: Sequence[FinetuneDocument], head, group, purpose: str = "calibration") -> np.ndarray:
    """Score the documents sharded over the ranks; rows [prediction, admitted, q, d, correct]."""
    outcomes = scorer(shard(documents, group), head, purpose)
    local = np.array(
        [[o.prediction, float(o.admitted), o.q, o.d, float(o.correct)] for o in outcomes],
        dtype=np.float32,
    ).reshape(-1, 5)
    return unshard_rows(local, len(documents), group)


def outcomes_from_rows(rows: np.ndarray) -> list[Outcome]:
    return [
        Outcome(prediction=int(r[0]), admitted=bool(r[1]), q=float(r[2]), d=float(r[3]), correct=bool(r[4]))
        for r in rows
    ]


def iterate_token_batches(count: int, batch_size: int, seed: int, epoch: int) -> Iterator[np.ndarray]:
    """The default batch iterator: all target tokens shuffled once per epoch (seed + epoch, so a
    resumed run draws the same batches), cut into global mini-batches of ``batch_size`` tokens."""
    order = np.random.default_rng(seed + epoch).permutation(count)
    for start in range(0, count, batch_size):
        yield order[start : start + batch_size]


def sdm_batch_loss(heads: VocabularyHeads, hidden, targets, q, d, beta, global_count, weight=None, group=None):
    """The default loss: Eq. 32 with the regulariser over one (rank's share of a) mini-batch.
    ``weight`` (0/1 per row) lets a rank with no rows of a short last batch join with a dummy row."""
    z_neg, z_pos = heads(hidden)
    nll, norms = sdm_token_terms(z_neg, z_pos, targets, q, d)
    if weight is not None:
        nll, norms = nll * weight, norms * weight
    loss, parts = sdm_loss_from_terms(nll, norms, beta, global_count=global_count, group=group)
    return loss, parts.nll


def gather_token_targets(lm, documents, vocab_size, group, progress=None) -> TokenTargets:
    """Token targets of all documents, force-decoded in shards and gathered in document order."""
    mine = shard_indices(len(documents), group)
    local = build_token_targets(lm, [documents[i] for i in mine], vocab_size, progress)
    owners = np.array(mine, dtype=np.int64)[local.document_index] if len(local) else local.document_index
    if group is None or group.size() == 1:
        return TokenTargets(local.hidden, local.targets, owners)
    hidden = np.concatenate(gather_rows(local.hidden.astype(np.float32), group))
    meta = np.concatenate(gather_rows(np.stack([local.targets, owners], axis=1).astype(np.int64), group))
    order = np.argsort(meta[:, 1], kind="stable")  # rows of one document stay in position order
    return TokenTargets(hidden[order], meta[order, 0], meta[order, 1])


def local_rows(global_batch: np.ndarray, group) -> np.ndarray:
    """This rank's rows of a global mini-batch (interleaved; all rows with one process)."""
    return global_batch[group.rank() :: group.size()] if group is not None else global_batch


def build_train_step(heads: VocabularyHeads, optimizer, loss: Callable = sdm_batch_loss, group=None, *, compile: bool = True):
    """One optimizer step on this rank's share of a global mini-batch, in mlx-lm's shape:
    ``nn.value_and_grad`` over the module, gradients averaged across ranks, ``mx.compile`` over
    the module and optimizer state. Returns ``step(hidden, targets, q, d, beta, global_count,
    weight=None) -> (loss, nll)`` on arrays; ``global_count`` is the number of tokens in the global
    batch, ``weight`` 0/1 per local row (a rank left without rows passes one dummy row of weight 0)."""
    group = group if group is not None else mx.distributed.init()
    loss_value_and_grad = nn.value_and_grad(heads, partial(loss, group=group))
    state = [heads.state, optimizer.state]

    def step(hidden, targets, q, d, beta, global_count, weight=None):
        (lvalue, nll), grad = loss_value_and_grad(heads, hidden, targets, q, d, beta, global_count, weight)
        if group.size() > 1:
            # Each rank's gradient is its share of the global-batch gradient: sum = average × size.
            grad = tree_map(lambda g: g * group.size(), nn.average_gradients(grad, group=group))
        optimizer.update(heads, grad)
        return lvalue, nll

    if compile and group.size() == 1:
        step = mx.compile(step, inputs=state, outputs=state)
    return step


def make_optimizer(learning_rate: float) -> optim.Adam:
    """Adam as in the reference (PyTorch defaults: betas (0.9, 0.999), eps 1e-8, bias correction)."""
    return optim.Adam(learning_rate=learning_rate, betas=list(ADAM_BETAS), eps=ADAM_EPS, bias_correction=True)


@dataclass
class FinetuneResult:
    heads: VocabularyHeads
    best_epoch: int
    best_metric: int
    initial_metric: int
    history: list[dict[str, Any]]
    data_hash: str
    epochs_run: int
    last_positive: mx.array | None = None  # W_pos after the last epoch (whether or not it was kept)


def _array_state(heads, best_positive, optimizer) -> dict[str, mx.array]:
    arrays = {"positive": heads.positive, "best_positive": best_positive}
    arrays.update({f"optimizer.{k}": v for k, v in tree_flatten(optimizer.state)})
    return arrays


def train_positive_head(
    lm,
    train_documents: Sequence[FinetuneDocument],
    calibration_documents: Sequence[FinetuneDocument],
    scorer: Scorer,
    args: FinetuneArgs = FinetuneArgs(),
    *,
    heads: VocabularyHeads | None = None,
    loss: Callable = sdm_batch_loss,
    iterate_batches: Callable[[int, int, int, int], Iterator[np.ndarray]] = iterate_token_batches,
    training_callback: FinetuneCallback | None = None,
    group=None,
    run_identity: dict[str, Any] | None = None,
) -> FinetuneResult:
    """Alg. 4 on (train, calibration) documents; returns the best positive head.

    ``lm``: the LM layer's ``LoadedModel`` (or anything with ``.model`` and ``.tokenizer``).
    ``scorer``: generation + verification (:class:`LMScorer`); ``loss`` and ``iterate_batches``
    are injectable as in mlx-lm's trainer; ``group``: the ``mx.distributed`` group (default: the
    global one, size 1 unless started by ``mlx.launch``)."""
    group = group if group is not None else mx.distributed.init()
    run = _Run(args, group, scorer, calibration_documents, training_callback)
    verified = _verified_documents(train_documents, calibration_documents)
    heads = heads if heads is not None else VocabularyHeads.from_model(lm.model)
    data_hash = documents_hash(list(train_documents) + list(calibration_documents))
    run_args = ("batch_size", "learning_rate", "seed", "beta_min", "beta_max", "warmup_epochs")
    identity = {"data_hash": data_hash, "args": {k: v for k, v in asdict(args).items() if k in run_args}}
    identity.update(run_identity or {})
    optimizer = make_optimizer(args.learning_rate)
    optimizer.init(heads.trainable_parameters())
    tokens = gather_token_targets(lm, verified, heads.vocab_size, group, progress=lambda it: run.bar(it, desc="targets"))
    if len(tokens) == 0:
        raise DataError("the verified documents have no completion tokens to train on", field="completion")
    state = run.start(heads, optimizer, identity)
    step = build_train_step(heads, optimizer, loss, group, compile=args.compile)

    def training_qd(epoch: int) -> np.ndarray:
        """(q, d) of every verified training document for ``epoch`` (§ 15.5), [n, 2]."""
        if epoch <= args.warmup_epochs:  # warm-up: the sdm activation reduces to softmax
            return np.tile(np.array([[SOFTMAX_Q, SOFTMAX_D]], dtype=np.float32), (len(verified), 1))
        return score_all(scorer, verified, heads.vocab_logits, group, "training")[:, 2:4]

    if state.qd is None and state.start_epoch <= args.epochs:
        state.qd = training_qd(state.start_epoch)
    epochs_bar = run.bar(range(state.start_epoch, args.epochs + 1), desc="epoch", initial=state.start_epoch - 1,
                         total=args.epochs)
    for epoch in epochs_bar:
        mean_loss = run.train_epoch(epoch, step, heads, optimizer, tokens, state.qd, iterate_batches)
        # Alg. 4: regenerate the training completions (new q, d; not needed after the last epoch)
        # and the calibration ones (metric).
        state.qd = training_qd(epoch + 1) if epoch < args.epochs else None
        run.end_epoch(epoch, mean_loss, heads, optimizer, state, identity, epochs_bar)
    last_positive = heads.positive
    heads.positive = state.best_positive
    mx.eval(heads.positive)
    return FinetuneResult(heads=heads, best_epoch=state.best_epoch, best_metric=state.best_metric,
                          initial_metric=state.initial_metric, history=state.history, data_hash=data_hash,
                          epochs_run=args.epochs, last_positive=last_positive)


def _verified_documents(train_documents: Sequence[FinetuneDocument],
                        calibration_documents: Sequence[FinetuneDocument]) -> list[FinetuneDocument]:
    """The label-1 training documents (the only ones the next-token loss trains on), checked."""
    verified = [doc for doc in train_documents if doc.label == 1]
    if not verified:
        raise DataError(
            "no documents with label 1 (verified); the next-token loss trains only on verified answers. "
            "Add rows whose completion is the correct answer, with \"label\": 1",
            field="label",
        )
    if any(doc.task_label is None for doc in calibration_documents):
        raise DataError("every calibration document needs a task_label to count correct answers", field="task_label")
    return verified


@dataclass
class _State:
    """Where Alg. 4 stands: the best epoch so far and its head, the history, the training (q, d)."""

    best_metric: int
    best_epoch: int
    initial_metric: int
    best_positive: Any
    history: list[dict[str, Any]]
    qd: np.ndarray | None
    start_epoch: int


class _Run:
    """One Alg. 4 run's plumbing: progress bars, the checkpoint, the per-epoch steps."""

    def __init__(self, args: FinetuneArgs, group, scorer: Scorer, calibration_documents, callback):
        from tqdm.auto import tqdm

        self.args, self.group, self.scorer, self.callback = args, group, scorer, callback
        self.calibration_documents = calibration_documents
        self.show = args.progress and group.rank() == 0
        self.bar = (lambda it, **kw: tqdm(it, leave=False, **kw)) if self.show else (lambda it, **kw: it)
        self.checkpoint_path = Path(args.checkpoint_path) if args.checkpoint_path else None

    def admitted_now(self, heads: VocabularyHeads) -> int:
        rows = score_all(self.scorer, self.calibration_documents, heads.vocab_logits, self.group)
        return admitted_count(outcomes_from_rows(rows))

    def start(self, heads: VocabularyHeads, optimizer, identity: dict[str, Any]) -> _State:
        """Resume from the checkpoint (same run only), or score the untuned head: the bar to beat."""
        loaded = read_checkpoint(self.checkpoint_path) if (self.checkpoint_path and self.args.resume) else None
        if loaded is None:
            if self.args.resume and self.group.rank() == 0 and self.checkpoint_path:
                print(f"no checkpoint at {self.checkpoint_path}; starting from the untuned head", flush=True)
            initial = self.admitted_now(heads)
            return _State(initial, 0, initial, mx.array(heads.positive),
                          [{"epoch": 0, "calibration_admitted": initial}], None, 1)
        arrays, state = loaded
        if state.get("identity") != identity:
            raise CheckpointError(
                f"{self.checkpoint_path}: this checkpoint belongs to another run (data, verifier or arguments differ: "
                f"{state.get('identity')} vs {identity}); drop --resume or pass another --adapter-path"
            )
        heads.positive = arrays["positive"]
        optimizer.state = tree_unflatten([(k[len("optimizer.") :], v) for k, v in arrays.items() if k.startswith("optimizer.")])
        qd = np.array(state["train_qd"], dtype=np.float32) if state.get("train_qd") is not None else None
        return _State(int(state["best_metric"]), int(state["best_epoch"]), int(state["initial_metric"]),
                      arrays["best_positive"], list(state["history"]), qd, int(state["epoch"]) + 1)

    def train_epoch(self, epoch: int, step, heads: VocabularyHeads, optimizer, tokens, qd: np.ndarray,
                    iterate_batches) -> float:
        """One pass over the target tokens in mini-batches (Eq. 32, β rising across the epoch); mean loss."""
        args, group = self.args, self.group
        batches = list(iterate_batches(len(tokens), args.batch_size, args.seed, epoch))
        losses, n_tokens, steps, tic = 0.0, 0, 0, time.perf_counter()
        batch_bar = self.bar(batches, desc=f"epoch {epoch} batches", unit="batch")
        for index, global_batch in enumerate(batch_bar):
            local = local_rows(global_batch, group)
            weight = np.ones(len(local), dtype=np.float32)
            if len(local) == 0:  # a short last batch leaves this rank nothing: one dummy row of weight 0
                local, weight = global_batch[:1], np.zeros(1, dtype=np.float32)
            doc_rows = tokens.document_index[local]
            beta = mx.array(beta_for_batch(index, len(batches), args.beta_min, args.beta_max), dtype=mx.float32)
            lvalue, nll = step(mx.array(tokens.hidden[local]), mx.array(tokens.targets[local]),
                               mx.array(qd[doc_rows, 0]), mx.array(qd[doc_rows, 1]), beta,
                               mx.array(float(len(global_batch))), mx.array(weight))
            mx.eval(lvalue, nll, heads.state, optimizer.state)
            losses += lvalue.item()
            n_tokens += len(global_batch)
            steps += 1
            elapsed = time.perf_counter() - tic
            if self.show and hasattr(batch_bar, "set_postfix"):
                batch_bar.set_postfix(loss=f"{lvalue.item():.4f}", tok_s=f"{n_tokens / max(elapsed, 1e-9):.0f}")
            if self.callback is not None and (steps % args.steps_per_report == 0 or index == len(batches) - 1):
                self.callback.on_train_loss_report({
                    "epoch": epoch, "iteration": index + 1, "train_loss": losses / steps,
                    "learning_rate": float(args.learning_rate), "tokens_per_second": n_tokens / max(elapsed, 1e-9),
                    "trained_tokens": n_tokens, "peak_memory": mx.get_peak_memory() / 1e9,
                })
        return losses / max(steps, 1)

    def end_epoch(self, epoch: int, mean_loss: float, heads: VocabularyHeads, optimizer, state: _State,
                  identity: dict[str, Any], epochs_bar) -> None:
        """Score the calibration answers, keep the best epoch, report, checkpoint (rank 0)."""
        metric = self.admitted_now(heads)
        if metric > state.best_metric:
            state.best_metric, state.best_epoch = metric, epoch
            state.best_positive = mx.array(heads.positive)
        info = {"epoch": epoch, "calibration_admitted": metric, "train_loss": mean_loss, "best_epoch": state.best_epoch}
        state.history.append(info)
        if self.callback is not None:
            self.callback.on_epoch_report(dict(info))
        if self.show and hasattr(epochs_bar, "set_postfix"):
            epochs_bar.set_postfix(admitted=metric, best=state.best_metric)
        if self.checkpoint_path is not None and self.group.rank() == 0:
            write_checkpoint(self.checkpoint_path, _array_state(heads, state.best_positive, optimizer), {
                "epoch": epoch, "best_metric": state.best_metric, "best_epoch": state.best_epoch,
                "initial_metric": state.initial_metric, "train_qd": None if state.qd is None else state.qd.tolist(),
                "history": state.history, "identity": identity,
            })
        if self.group.size() > 1:
            mx.eval(mx.distributed.all_sum(mx.array(0.0), group=self.group, stream=mx.cpu))  # wait for rank 0's write
