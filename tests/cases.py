"""The one table of algorithm cases that drives the contract suite (optax ``alias_test.py`` style).

Every row is one registered method with one set of hyperparameters (its defaults, a preset, or a
non-default value that switches a term on). The facts in a row come from the method's docstring and
its section of ``notebooks/book/guide/methods.md``, not from running fedlab:

* ``up`` / ``down`` — floats sent per participating client per round, in units of d (the model
  size), in real FL; ``up_scalars`` extra scalars on the uplink; ``down_round0`` where round 0
  differs (FedVSSAM's plain-FedSAM first round);
* ``grads`` — gradient evaluations per local step; ``step0_extra`` extra evaluations at a client's
  first step (FedSMOO-adaptive's sharpness probe), ``warm_grads`` the count during warm-up rounds;
* ``expect_hp`` — hyperparameter values the row must resolve to (the spec's preset values);
* ``reduces_to`` — a change of hyperparameters under which the method reproduces another one
  bit for bit, as its docstring claims;

``tests/test_registry.py`` and the per-family test files read their communication expectations
from here; ``tests/test_contract.py`` runs every row against an independent reference.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Reduction:
    """With ``params`` (merged over the row's), the method equals ``target(**target_params)`` exactly."""

    params: dict[str, Any]
    target: str
    target_params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    method: str
    label: str  # test id, unique
    params: dict[str, Any]
    up: float
    down: float
    grads: int
    up_scalars: int = 0
    down_scalars: int = 0
    down_round0: float | None = None
    step0_extra: int = 0
    warm_grads: int | None = None
    expect_hp: dict[str, Any] = field(default_factory=dict)
    reduces_to: Reduction | None = None

    @property
    def is_default(self) -> bool:
        return not self.params

    def down_in_round(self, t: int) -> float:
        return self.down_round0 if (t == 0 and self.down_round0 is not None) else self.down


CASES: tuple[Case, ...] = (
    # --- FedAvg family ------------------------------------------------------------------------
    Case("fedavg", "fedavg", {}, 1, 1, 1),
    Case("fedavg", "fedavg-server_lr", {"server_lr": 0.5}, 1, 1, 1),
    Case("fedprox", "fedprox", {}, 1, 1, 1, reduces_to=Reduction({"mu": 0.0}, "fedavg")),
    Case("fedprox", "fedprox-flsim_default", {"preset": "flsim_default"}, 1, 1, 1, expect_hp={"mu": 0.1}),
    Case("fedacg", "fedacg", {}, 1, 1, 1, reduces_to=Reduction({"lam": 0.0, "beta": 0.0}, "fedavg")),
    Case("fedacg", "fedacg-beta", {"beta": 0.5}, 1, 1, 1),
    # --- control variates ------------------------------------------------------------------------
    Case("scaffold", "scaffold", {}, 2, 2, 1),
    Case("scaffold", "scaffold-server_lr", {"server_lr": 0.5}, 2, 2, 1),
    Case("fedgamma", "fedgamma", {}, 2, 2, 2, reduces_to=Reduction({"rho": 0.0}, "scaffold")),
    Case("fedgamma", "fedgamma-corrected_perturbation", {"preset": "corrected_perturbation", "rho": 0.1},
         2, 2, 2, expect_hp={"perturb_with_correction": True}),
    # --- FedDyn family ---------------------------------------------------------------------------
    Case("feddyn", "feddyn", {}, 1, 1, 1),
    Case("fedspeed", "fedspeed", {}, 1, 1, 2, reduces_to=Reduction({"rho": 0.0}, "feddyn")),
    Case("fedsmoo", "fedsmoo", {}, 2, 2, 2, reduces_to=Reduction({"rho": 0.0}, "feddyn")),
    # --- local SAM -------------------------------------------------------------------------------
    Case("fedsam", "fedsam", {}, 1, 1, 2, reduces_to=Reduction({"rho": 0.0}, "fedavg")),
    Case("mofedsam", "mofedsam", {}, 1, 2, 2, reduces_to=Reduction({"alpha": 1.0}, "fedsam")),
    Case("mofedsam", "mofedsam-alpha", {"alpha": 0.5, "server_lr": 0.8}, 1, 2, 2),
    # FedSMOO-adaptive: the default warm-up (3 rounds) covers the contract's 3-round run entirely (plain FedAvg)
    Case("fedsmoo_adaptive", "fedsmoo_adaptive", {}, 1, 1, 2, up_scalars=2, step0_extra=1, warm_grads=1,
         reduces_to=Reduction({"warmup_rounds": 5}, "fedavg")),
    Case("fedsmoo_adaptive", "fedsmoo_adaptive-warmup1", {"warmup_rounds": 1, "window": 2}, 1, 1, 2,
         up_scalars=2, step0_extra=1, warm_grads=1),
    Case("fedsmoo_adaptive", "fedsmoo_adaptive-nowarmup", {"warmup_rounds": 0, "rho_max": 0.2}, 1, 1, 2,
         up_scalars=2, step0_extra=1, warm_grads=1),
    Case("fedlesam", "fedlesam", {}, 1, 1, 1, reduces_to=Reduction({"rho": 0.0}, "fedavg")),
    Case("fedlesam", "fedlesam-readme", {"preset": "readme"}, 1, 1, 1, expect_hp={"rho": 0.5}),
    Case("fedlesam", "fedlesam-last_global_update", {"variant": "last_global_update", "rho": 0.5}, 1, 2, 1,
         reduces_to=Reduction({"rho": 0.0}, "fedavg")),
    # --- SWA -------------------------------------------------------------------------------------
    Case("fedswa", "fedswa", {}, 1, 1, 1, reduces_to=Reduction({"rho": 1.0, "alpha": 1.0}, "fedavg")),
    Case("fedswa", "fedswa-paper", {"preset": "paper"}, 1, 1, 1,
         expect_hp={"rho": 0.1, "alpha": 1.5, "lr_multiplier": 1.0}),
    Case("fedswa", "fedswa-code", {"preset": "code"}, 1, 1, 1,
         expect_hp={"rho": 0.0, "alpha": 1.0, "lr_multiplier": 2.0}),
    Case("fedmoswa", "fedmoswa", {}, 2, 2, 1),
    Case("fedmoswa", "fedmoswa-paper", {"preset": "paper"}, 2, 2, 1,
         expect_hp={"rho": 0.1, "alpha": 1.5, "gamma": 0.2}),
    Case("fedmoswa", "fedmoswa-code", {"preset": "code"}, 2, 2, 1,
         expect_hp={"rho": 1.0, "alpha": 1.0, "gamma": 0.4, "c_first_round_mean": True}),
    Case("fedmoswa", "fedmoswa-first_upload", {"preset": "first_upload"}, 2, 2, 1,
         expect_hp={"rho": 0.1, "alpha": 1.0, "gamma": 0.1, "c_first_round_mean": True}),
    Case("fedmoswa", "fedmoswa-clip_correction", {"clip_correction": True}, 2, 2, 1),
    # --- global momentum / variance suppression ------------------------------------------------------
    Case("fednsam", "fednsam", {}, 1, 1, 2, reduces_to=Reduction({"gamma": 0.0}, "fedsam", {"rho": 0.05})),
    Case("fednsam", "fednsam-code", {"preset": "code"}, 1, 1, 2,
         expect_hp={"variant": "code", "extrapolation": "round_start", "momentum_overwrite_bug": False}),
    Case("fednsam", "fednsam-paper", {"preset": "paper", "rho": 0.2}, 1, 2, 1,
         expect_hp={"variant": "paper", "extrapolation": "round_start"}),
    Case("fednsam", "fednsam-official_repo", {"preset": "official_repo"}, 1, 1, 2,
         expect_hp={"variant": "code", "momentum_overwrite_bug": True}),
    Case("fednsam", "fednsam-every_step", {"extrapolation": "every_step"}, 1, 2, 2),
    Case("fednsam", "fednsam-paper-every_step", {"variant": "paper", "extrapolation": "every_step",
                                                  "rho": 0.2}, 1, 2, 1),
    Case("fedvssam", "fedvssam", {}, 1, 2, 2, expect_hp={"gamma_l": 0.4, "gamma_g": 0.6},
         reduces_to=Reduction({"gamma_l": 1.0, "gamma_g": 1.0, "server_lr_scale": 1.0}, "fedsam", {"rho": 0.05})),
    Case("fedvssam", "fedvssam-moderate", {"preset": "moderate"}, 1, 2, 2,
         expect_hp={"gamma_l": 0.4, "gamma_g": 0.6}),
    Case("fedvssam", "fedvssam-high", {"preset": "high", "server_lr_scale": 0.7}, 1, 2, 2,
         expect_hp={"gamma_l": 0.1, "gamma_g": 0.6}),
    Case("fedvssam", "fedvssam-base", {"preset": "base"}, 1, 1, 2,
         expect_hp={"gamma_l": 1.0, "gamma_g": 1.0},
         reduces_to=Reduction({}, "fedsam", {"rho": 0.05})),
    Case("fedvssam", "fedvssam-first_round", {"h_init": "first_round", "rho": 0.1}, 1, 2, 2, down_round0=1),
    Case("fedvssam", "fedvssam-no_lf-no_gu", {"lf": False, "gu": False, "rho": 0.1}, 1, 2, 2),
    Case("fedvssam", "fedvssam-no_lf-no_lu", {"lf": False, "lu": False, "rho": 0.1}, 1, 1, 2),
    Case("fedvssam", "fedvssam-no_lu", {"lu": False, "rho": 0.1}, 1, 2, 2),
    # --- successors (issue 27) -------------------------------------------------------------------
    Case("fedgf", "fedgf", {}, 1, 2, 2, down_scalars=1,
         reduces_to=Reduction({"divergence_threshold": 1e9}, "fedsam", {"rho": 0.05})),
    Case("fedgf", "fedgf-always_global", {"divergence_threshold": 0.0, "rho_global": 0.3, "window": 2},
         1, 2, 2, down_scalars=1),
    Case("fedgf", "fedgf-mixed", {"window": 3, "rho": 0.1, "server_lr": 0.8, "divergence_threshold": 0.25}, 1, 2, 2, down_scalars=1),
    Case("fedgloss", "fedgloss", {}, 1, 1, 2, expect_hp={"rho_server": 0.15, "rho": 0.15, "beta": 10.0},
         reduces_to=Reduction({"rho_server": 0.0, "dual": False}, "fedsam", {"rho": 0.15})),
    Case("fedgloss", "fedgloss-cifar10", {"preset": "cifar10"}, 1, 1, 2,
         expect_hp={"rho_server": 0.15, "rho": 0.15, "beta": 10.0, "ramp_rounds": 2000, "rho0": 0.001}),
    Case("fedgloss", "fedgloss-cifar100", {"preset": "cifar100"}, 1, 1, 2,
         expect_hp={"rho_server": 0.01, "rho": 0.2, "beta": 100.0, "ramp_rounds": 15000}),
    Case("fedgloss", "fedgloss-code", {"preset": "code"}, 1, 1, 2,
         expect_hp={"server_ramp": "code", "ramp_rounds": 2000, "eps": 1e-16}),
    Case("fedgloss", "fedgloss-ramp", {"ramp_rounds": 2, "rho0": 0.01, "rho_server": 0.3}, 1, 1, 2),
    Case("fedgloss", "fedgloss-code_warmup", {"ramp_rounds": 2, "rho0": 0.01, "rho_server": 0.3, "server_ramp": "code"},
         1, 1, 2),
    Case("fedgloss", "fedgloss-no_dual", {"dual": False, "beta": 1.0}, 1, 1, 2),
    Case("fedwmsam", "fedwmsam", {}, 1, 3, 1, down_scalars=1, expect_hp={"rho": 0.01, "perturb": "toward"},
         reduces_to=Reduction({"rho": 0.0, "adaptive": False, "personalised": False}, "mofedsam",
                              {"rho": 0.0, "alpha": 0.1})),
    Case("fedwmsam", "fedwmsam-paper", {"preset": "paper"}, 1, 3, 1, down_scalars=1,
         expect_hp={"rho": 0.01, "perturb": "toward", "momentum_scale": 1.0}),
    Case("fedwmsam", "fedwmsam-code", {"preset": "code"}, 1, 3, 1, down_scalars=1,
         expect_hp={"rho": 0.1, "perturb": "away", "momentum_scale": 0.998, "eps": 1e-7}),
    Case("fedwmsam", "fedwmsam-alpha", {"alpha": 0.5, "rho": 0.05}, 1, 3, 1, down_scalars=1),
    Case("fedwmsam", "fedwmsam-fixed_alpha-shared_momentum", {"adaptive": False, "personalised": False,
                                                               "alpha": 0.4, "rho": 0.2}, 1, 2, 1, down_scalars=1),
    Case("fedgmt", "fedgmt", {}, 1, 2, 1, expect_hp={"gamma": 1.0, "alpha": 0.95, "tau": 3.0, "beta": 10.0},
         reduces_to=Reduction({"gamma": 0.0, "dual": False}, "fedavg")),
    Case("fedgmt", "fedgmt-code", {"preset": "code"}, 1, 2, 1,
         expect_hp={"gamma": 1.0, "alpha": 0.95, "tau": 3.0, "beta": 10.0, "dual": True}),
    # a fast EMA and a strong dual, so that the trajectory and h_i/β move the numbers within 3 rounds
    Case("fedgmt", "fedgmt-fast_ema", {"alpha": 0.5, "tau": 1.0, "gamma": 2.0, "beta": 2.0}, 1, 2, 1),
    Case("fedgmt", "fedgmt-no_dual", {"dual": False, "alpha": 0.3}, 1, 2, 1),
    Case("fedsol", "fedsol", {}, 1, 1, 2, expect_hp={"rho": 1.0, "tau": 3.0, "eps": 1e-12},
         reduces_to=Reduction({"rho": 0.0}, "fedavg")),
    Case("fedsol", "fedsol-small_rho", {"rho": 0.1, "tau": 1.0, "server_lr": 0.8}, 1, 1, 2),
    # --- issue 45: FedLESAM on SCAFFOLD and on FedDyn; client-level DP ------------------------------
    # the code scales SCAFFOLD's correction by λ_c = 0.1: SCAFFOLD itself needs λ_c = 1 as well as ρ = 0
    Case("fedlesam_s", "fedlesam_s", {}, 2, 2, 1, expect_hp={"rho": 0.01, "correction_scale": 0.1},
         reduces_to=Reduction({"rho": 0.0, "correction_scale": 1.0}, "scaffold")),
    Case("fedlesam_s", "fedlesam_s-readme", {"preset": "readme"}, 2, 2, 1, expect_hp={"rho": 0.5}),
    Case("fedlesam_s", "fedlesam_s-unscaled", {"preset": "unscaled", "rho": 0.1}, 2, 2, 1,
         expect_hp={"correction_scale": 1.0}),
    Case("fedlesam_s", "fedlesam_s-last_global_update", {"variant": "last_global_update", "rho": 0.5}, 2, 3, 1,
         reduces_to=Reduction({"rho": 0.0, "correction_scale": 1.0}, "scaffold")),
    Case("fedlesam_d", "fedlesam_d", {}, 1, 1, 1, expect_hp={"rho": 0.01, "lam": 0.1},
         reduces_to=Reduction({"rho": 0.0}, "feddyn")),
    Case("fedlesam_d", "fedlesam_d-last_global_update", {"variant": "last_global_update", "rho": 0.5}, 1, 2, 1,
         reduces_to=Reduction({"rho": 0.0}, "feddyn")),
    # the DP defaults clip every update here (‖Δ_i‖ = 0.27–0.41 > C = 0.2) and add noise of σC/m = 0.06–0.1
    Case("dp_fedavg", "dp_fedavg", {}, 1, 1, 1, expect_hp={"update_clip": 0.2, "noise_multiplier": 0.95},
         reduces_to=Reduction({"noise_multiplier": 0.0, "update_clip": None}, "fedavg")),
    Case("dp_fedavg", "dp_fedavg-clip_only", {"noise_multiplier": 0.0, "update_clip": 0.3, "server_lr": 0.8},
         1, 1, 1),
    Case("dp_fedsam", "dp_fedsam", {}, 1, 1, 2, expect_hp={"rho": 0.5, "update_clip": 0.2, "noise_multiplier": 0.95},
         reduces_to=Reduction({"rho": 0.0}, "dp_fedavg")),
    Case("dp_fedsam", "dp_fedsam-no_privacy", {"noise_multiplier": 0.0, "update_clip": None}, 1, 1, 2,
         reduces_to=Reduction({}, "fedsam", {"rho": 0.5})),
    Case("dp_fedsam", "dp_fedsam-code", {"preset": "code"}, 1, 1, 2, expect_hp={"adaptive": True}),
    # FedScar: up Δ_i, b_i and the bias step s_i; down θ^t and b̄. With α = β = 0 no bias and no dual act
    Case("fedscar", "fedscar", {}, 3, 2, 2, expect_hp={"rho": 0.1, "alpha": 0.1, "gamma": 0.9, "beta": 0.06},
         reduces_to=Reduction({"alpha": 0.0, "beta": 0.0}, "fedsam")),
    Case("fedscar", "fedscar-strong", {"alpha": 0.3, "beta": 0.3, "gamma": 0.5, "rho": 0.05}, 3, 2, 2),
    # FedFSA: MoFedSAM's communication (down θ^t and m, up Δ_i); its own model and layer choice stay on the
    # client. With ρ_larger = ρ every layer has one radius: MoFedSAM; top_c = 0 chooses no layer
    Case("fedfsa", "fedfsa", {}, 1, 2, 2, expect_hp={"rho": 0.1, "rho_larger": 0.2, "top_c": 2, "alpha": 0.1},
         reduces_to=Reduction({"rho_larger": 0.1}, "mofedsam", {"rho": 0.1, "eps": 1e-7})),
    Case("fedfsa", "fedfsa-cifar100", {"preset": "cifar100"}, 1, 2, 2, expect_hp={"rho": 0.05, "rho_larger": 0.9},
         reduces_to=Reduction({"top_c": 0}, "mofedsam", {"rho": 0.05, "eps": 1e-7})),
    Case("fedfsa", "fedfsa-resnet18", {"preset": "resnet18"}, 1, 2, 2,
         expect_hp={"rho": 0.05, "rho_larger": 1.0, "top_c": 5}),
    # one sharp layer of three, a strong SAM term (α = 0.7): the choice moves the numbers within 3 rounds
    Case("fedfsa", "fedfsa-top1", {"top_c": 1, "rho_larger": 0.8, "alpha": 0.7}, 1, 2, 2,
         reduces_to=Reduction({"rho_larger": 0.1, "rho": 0.1, "alpha": 1.0}, "fedsam", {"rho": 0.1, "eps": 1e-7})),
)

BY_LABEL: dict[str, Case] = {c.label: c for c in CASES}
assert len(BY_LABEL) == len(CASES), "case labels must be unique"

DEFAULTS: dict[str, Case] = {c.method: c for c in CASES if c.is_default}
"""The row with default hyperparameters of every method."""


def communication(method: str) -> tuple[float, float]:
    """(uplink, downlink) per client per round in units of d with default hyperparameters."""
    case = DEFAULTS[method]
    return case.up, case.down
