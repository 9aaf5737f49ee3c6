"""The algorithm contract: federated methods as pure vector math on flat parameter vectors.

An algorithm never touches an ``nn.Module``, a DataLoader or a device. It sees

* θ ∈ R^d, the model as one flat tensor (see :mod:`fedlab.models.functional`);
* ``grad_fn(θ, batch) -> (∇f(θ; batch), f(θ; batch))``, the minibatch gradient oracle of the plain
  cross-entropy loss (no weight decay);
* dictionaries of tensors for its server state, per-client state, the message it broadcasts and the
  upload each client sends back.

One round, as the engine drives it::

    msg          = broadcast(server, info)                       # counted as downlink floats (× m)
    for each sampled client i (sequentially, or vmapped over a chunk of clients):
        θ_{i,0}  = client_start(msg, c_i, info)
        θ_{i,k+1}, c_i, loss = local_step(θ_{i,k}, c_i, msg, batch_k, grad_fn, step)   k = 0..K-1
        up_i, c_i = upload(θ_{i,0}, θ_{i,K}, c_i, msg, info, K)  # counted as uplink floats
    server       = aggregate(server, stack(up_i), info)

K is the number of steps client i really runs, K_i: the configured K in fixed-K mode, E·⌈n_i/B⌉ in
epoch mode (:attr:`RoundInfo.mean_steps` says which K a rule takes).

Sign convention (every reference code base agrees): Δ_i = θ_{i,K} − θ_{i,0} is a *descent*
displacement (≈ −η Σ_k g), the server applies θ^{t+1} = θ^t + η_g · mean Δ_i, and the
pseudo-gradient is −mean Δ_i / (η K).

``local_step`` must be vmappable: no ``.item()``, no Python branching on tensor values, no in-place
updates of its inputs. Weight decay and gradient clipping act on the final descent direction, never on
a SAM ascent direction (:func:`descend`).
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from fedlab.models.functional import Batch, GradFn

State = dict[str, Tensor]
"""Server state, client state, message or upload: a flat dict of tensors."""

Layout = tuple[tuple[str, tuple[int, ...]], ...]
"""How θ splits into the model's parameter tensors: (name, shape) of each, in θ's order (the module's
``named_parameters``). Empty when the driver has no module (a gradient oracle of a toy problem)."""


@dataclass(frozen=True)
class RoundInfo:
    """What every party knows about round t."""

    round: int  # t, 0-based
    lr: float  # η_t, the local learning rate of this round
    prev_lr: float  # η_{t-1} (= η_t in round 0), for rules that rescale the last update (FedCM-style)
    client_steps: tuple[int, ...]  # K_i, the local steps each sampled client runs, in upload order
    n_clients: int  # N, all clients
    weight_decay: float
    clip_norm: float | None
    seed: int = 0  # the run's seed: a method that draws noise derives its generator from it (fedlab._rng)
    layout: Layout = ()  # θ's parameter tensors (a layer-wise method's layers); () when there is no module

    def __post_init__(self) -> None:
        steps = tuple(self.client_steps)
        if not steps or any(isinstance(k, bool) or int(k) != k or k < 1 for k in steps):
            raise ValueError(f"client_steps must be a non-empty sequence of integers ≥ 1 (got {self.client_steps!r})")
        object.__setattr__(self, "client_steps", tuple(int(k) for k in steps))

    @property
    def n_sampled(self) -> int:
        """m = |S_t|."""
        return len(self.client_steps)

    @property
    def mean_steps(self) -> float:
        """K̄ = (1/m) Σ_{i∈S_t} K_i: the K of a rule that normalises a *mean* update (= K in fixed-K mode).

        A rule that is per client (SCAFFOLD's c_i⁺, FedMoSWA's Σ_k η_k) uses that client's own K_i
        (the ``K`` argument of ``upload``, ``StepInfo.K`` inside the round) instead.
        """
        return sum(self.client_steps) / len(self.client_steps)


@dataclass(frozen=True)
class StepInfo:
    """What a client knows at its local step k of K."""

    k: int
    K: int
    lr: float
    weight_decay: float
    clip_norm: float | None
    round: int = 0  # t, for methods with round-dependent local behaviour (warm-ups)


def clip_by_norm(v: Tensor, max_norm: float | None) -> Tensor:
    """Global-norm clipping v · min(1, C / (‖v‖ + 1e-6)), as ``torch.nn.utils.clip_grad_norm_``.

    Vmappable (no branching). ``max_norm=None`` returns v unchanged.
    """
    if max_norm is None or math.isinf(max_norm):
        return v
    scale = torch.clamp(max_norm / (torch.linalg.vector_norm(v, dim=-1, keepdim=True) + 1e-6), max=1.0)
    return v * scale


def normalized(v: Tensor, eps: float) -> Tensor:
    """v / (‖v‖ + eps); the zero vector maps to zero (no NaN), which switches a perturbation off."""
    return v / (torch.linalg.vector_norm(v, dim=-1, keepdim=True) + eps)


def descend(theta: Tensor, direction: Tensor, step: StepInfo, *, unclipped: Tensor | None = None,
            lr: float | None = None) -> Tensor:
    """One SGD step θ ← θ − η (clip(d, C) + u + wd·θ), the update every reference code performs.

    ``direction`` is clipped (FL-Simulator clips the whole accumulated gradient before the optimizer
    adds weight decay); ``unclipped`` holds terms that the reference codes apply through the
    optimizer's weight decay (e.g. FedDyn's λθ) and therefore outside the clip.
    """
    d = clip_by_norm(direction, step.clip_norm)
    if unclipped is not None:
        d = d + unclipped
    if step.weight_decay:
        d = d + step.weight_decay * theta
    return theta - (step.lr if lr is None else lr) * d


def stacked_mean(uploads: State, key: str) -> Tensor:
    """Mean over the client dimension (dim 0) of one upload field."""
    return uploads[key].mean(dim=0)


@dataclass(frozen=True)
class Interval:
    """The allowed values of a numeric hyperparameter: a finite number in [lo, hi] (``None``: unbounded
    on that side; ``lo_open``/``hi_open`` exclude the bound). ``str()`` gives the usual notation."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False

    def __contains__(self, value: float) -> bool:
        ok = math.isfinite(value)
        if self.lo is not None:
            ok = ok and (value > self.lo if self.lo_open else value >= self.lo)
        if self.hi is not None:
            ok = ok and (value < self.hi if self.hi_open else value <= self.hi)
        return ok

    def __str__(self) -> str:
        left = "(-inf" if self.lo is None else f"{'(' if self.lo_open else '['}{self.lo:g}"
        right = "inf)" if self.hi is None else f"{self.hi:g}{')' if self.hi_open else ']'}"
        return f"{left}, {right}"


def hparam(default: Any, *, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False, hi_open: bool = False) -> Any:
    """A numeric :class:`HParams` field with its allowed :class:`Interval`, checked by :meth:`HParams.check_fields`.

    ``rho: float = hparam(0.1, lo=0)`` reads "ρ ∈ [0, ∞), default 0.1"; ``hparam(0.85, lo=0, hi=1,
    hi_open=True)`` is [0, 1). The interval lives in the field's metadata (``"interval"``).
    """
    return dataclasses.field(default=default, metadata={"interval": Interval(lo, hi, lo_open, hi_open)})


_KINDS: dict[Any, tuple[str, Callable[[Any], bool]]] = {
    # bool is an int subclass, but rho=True or window=True is a mistake, never 1
    float: ("a number (not a bool)", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    int: ("an integer (not a bool)", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    bool: ("True or False", lambda v: isinstance(v, bool)),
    str: ("a string", lambda v: isinstance(v, str)),
}


def _admits(hint: Any, value: Any) -> tuple[bool, str]:
    """Whether ``value`` has the annotated type ``hint``, and the allowed values in words.

    Understood: ``float``, ``int``, ``bool``, ``str``, ``Literal[...]`` and ``X | None``.
    """
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = typing.get_args(hint)
        (inner,) = [a for a in args if a is not type(None)]  # one type, optionally with None
        if value is None and type(None) in args:
            return True, ""
        ok, allowed = _admits(inner, value)
        return ok, f"{allowed} or None"
    if typing.get_origin(hint) is typing.Literal:
        choices = typing.get_args(hint)
        # type(value) is type(c): True must not pass for a Literal[1], nor 1 for Literal[True]
        ok = any(value == c and type(value) is type(c) for c in choices)
        return ok, "one of " + ", ".join(repr(c) for c in choices)
    if hint not in _KINDS:
        raise TypeError(f"hyperparameter annotation {hint!r} is not one of float, int, bool, str, Literal[...], X | None")
    allowed, ok = _KINDS[hint]
    return ok(value), allowed


@dataclass(frozen=True)
class HParams:
    """Base class of every algorithm's hyperparameter dataclass.

    Each field is checked from its declaration alone (:meth:`check_fields`): its annotation (``float``,
    ``int``, ``bool``, ``str``, ``Literal["a", "b"]``, ``X | None``) and, for numbers, the
    :class:`Interval` given with :func:`hparam`. A subclass overrides :meth:`validate` only for what a
    single field cannot say (a bound that depends on another field).
    """

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], *, algorithm: str = "") -> "HParams":
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            allowed = ", ".join(sorted(names)) or "(none)"
            raise ValueError(
                f"algorithm_params: unknown hyperparameter(s) {unknown} for '{algorithm}'; allowed: {allowed}"
            )
        hp = cls(**dict(values))
        hp.check(algorithm)
        return hp

    def check(self, algorithm: str = "") -> None:
        """:meth:`check_fields`, then :meth:`validate` (its message prefixed with the algorithm's name)."""
        self.check_fields(algorithm)
        try:
            self.validate()
        except ValueError as err:
            raise ValueError(f"algorithm_params for '{algorithm}': {err}") from None

    def check_fields(self, algorithm: str = "") -> None:
        """Raise ValueError naming the algorithm, the field, the value and what is allowed when a value
        does not have its declared type (a float field takes any real number but not a bool, a
        ``Literal`` field one of its strings) or lies outside its :class:`Interval` (finite numbers only).
        Runs before :meth:`validate`, which may then assume well-typed values.
        """
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            ok, allowed = _admits(hints[f.name], value)
            interval = f.metadata.get("interval")
            if interval is not None:
                ok = ok and (value is None or value in interval)
                allowed = allowed.replace("(not a bool)", f"(not a bool) in {interval}", 1)
            if not ok:
                raise ValueError(f"algorithm_params: {f.name}={value!r} for '{algorithm}' is invalid; "
                                 f"allowed: {allowed}")

    def validate(self) -> None:
        """Raise ValueError naming the field when fields are inconsistent with each other (override per method)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def check_range(name: str, value: float, lo: float | None = None, hi: float | None = None,
                *, lo_open: bool = False, hi_open: bool = False) -> None:
    """Raise ``ValueError("name must be in ... (got v)")`` if value lies outside the interval.

    For bounds that depend on another field (in :meth:`HParams.validate`); a fixed bound belongs on the
    field (:func:`hparam`)."""
    interval = Interval(lo, hi, lo_open, hi_open)
    if value not in interval:
        raise ValueError(f"{name} must be in {interval} (got {value!r})")


class Algorithm:
    """Base class. Subclasses set the class attributes and override the contract methods.

    The class attributes are everything known about a method, stated once (``python -m fedlab algorithms``,
    the lab's figures and tables and :func:`fedlab.tune` read them from here): ``name`` (the registry key),
    ``label`` (how figures and tables name it), ``color`` (its colour in every figure, no two methods
    alike), ``order`` (its place in figures and tables), ``paper`` (short citation), ``hparams_cls``,
    ``tuning`` (each sensitive hyperparameter's candidates, from its declared default, e.g.
    :func:`~fedlab.algorithms.sam.sam_radii`: ``fedlab.tune``'s default grid), ``grad_evals_per_step``,
    ``state_where`` (where persistent state lives), ``presets`` (named hyperparameter sets),
    ``personal_models`` (whether clients keep models of their own, see :meth:`personal_model`).
    """

    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    color: ClassVar[str] = ""
    order: ClassVar[int] = 0
    paper: ClassVar[str] = ""
    hparams_cls: ClassVar[type[HParams]] = HParams
    tuning: ClassVar[Mapping[str, tuple[Any, ...]]] = {}
    grad_evals_per_step: ClassVar[int] = 1
    state_where: ClassVar[str] = "server: θ"
    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    personal_models: ClassVar[bool] = False  # True: each client keeps its own model (:meth:`personal_model`)

    def __init__(self, hparams: HParams | Mapping[str, Any] | None = None, **overrides: Any) -> None:
        self.hp = self.resolve_hparams(hparams, overrides)

    @classmethod
    def resolve_hparams(cls, hparams: HParams | Mapping[str, Any] | None, overrides: Mapping[str, Any]) -> HParams:
        """The validated hyperparameters of ``cls(hparams, **overrides)``: a dict (with an optional
        ``"preset"`` name, whose values the explicit ones override) or an :class:`HParams` instance."""
        if isinstance(hparams, HParams):
            if overrides:
                hparams = dataclasses.replace(hparams, **overrides)
                hparams.check(cls.name)
            return hparams
        values = dict(hparams or {})
        values.update(overrides)
        preset = values.pop("preset", None)
        if preset is not None:
            if preset not in cls.presets:
                allowed = ", ".join(sorted(cls.presets)) or "(none)"
                raise ValueError(f"preset '{preset}' unknown for '{cls.name}'; allowed: {allowed}")
            values = {**cls.presets[preset], **values}
        return cls.hparams_cls.from_dict(values, algorithm=cls.name)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.hp})"

    # --- contract -------------------------------------------------------------------------------
    def server_init(self, theta0: Tensor) -> State:
        return {"theta": theta0.clone()}

    def client_init(self, theta0: Tensor) -> State:
        """Persistent state kept *on* client i between its participations (empty if stateless)."""
        return {}

    def broadcast(self, server: State, info: RoundInfo) -> State:
        return {"theta": server["theta"]}

    def client_start(self, msg: State, cstate: State, info: RoundInfo) -> Tensor:
        """θ_{i,0}, the point local training starts from (a look-ahead point in FedACG/FedNSAM)."""
        return msg["theta"]

    def local_step(
        self, theta: Tensor, cstate: State, msg: State, batch: Batch, grad_fn: GradFn, step: StepInfo
    ) -> tuple[Tensor, State, Tensor]:
        """One local step; returns (θ_{k+1}, client state, loss at θ_k on the batch)."""
        raise NotImplementedError

    def upload(
        self, theta0: Tensor, thetaK: Tensor, cstate: State, msg: State, info: RoundInfo, K: int
    ) -> tuple[State, State]:
        """What client i sends up, and its updated persistent state. Default: Δ_i = θ_{i,K} − θ_{i,0}."""
        return {"delta": thetaK - theta0}, cstate

    def aggregate(self, server: State, uploads: State, info: RoundInfo) -> State:
        raise NotImplementedError

    def global_model(self, server: State) -> Tensor:
        """The model that is evaluated and whose distance Δ_D to the clients is measured."""
        return server["theta"]

    def personal_model(self, cstate: State, server: State) -> Tensor:
        """Client i's own model θ_i, the one its own test split measures (``Config.client_eval``), from its
        persistent state (``client_init(θ⁰)`` if it never took part). Default: the global model; a
        personalised method overrides it and sets ``personal_models = True``."""
        return self.global_model(server)

    def round_metrics(self, server: State) -> dict[str, float]:
        """Extra per-round scalars an algorithm wants logged (e.g. adaptive ρ_k)."""
        return {}
