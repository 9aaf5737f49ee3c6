# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 00 · Quickstart: train a federation in five minutes
#
# **The question.** What does it take to train a model on data spread over many clients, each holding only a
# few of the classes, and to watch it learn? With fedlab: one `Config` that describes the federation, one
# call to `fedlab.run` per method, one plot.
#
# **What you should see.** Two curves of the global model's test accuracy over the communication rounds, both
# rising from chance (10 % on Fashion-MNIST's ten classes) to about two thirds correct within 30 rounds, jagged
# from round to round (each round samples other clients). FedAvg averages the clients' locally trained models;
# FedSAM does the same, but every local step is *sharpness-aware*. This run is small on purpose (20 clients, 30
# short rounds, one seed; half a minute on a laptop): it is a **smoke test, not a comparison**, and which curve
# ends on top here is chance. Whether and where SAM helps a federation is what the course measures, after it has
# built both methods from scratch (01b).
#
# Symbols: the notation page, `notebooks/book/notation.md`. How the evidence behind the figures is made, and
# the words for it: `notebooks/book/guide/running.md`.

# %% tags=["parameters"]
profile = "ci"  # the quickstart is the same small run at every size; nothing here is saved or judged

# %%
import matplotlib.pyplot as plt
import fedlab

# %% [markdown]
# The federation: Fashion-MNIST (the default dataset), a small MLP, 3 000 training images split over 20 clients
# by a Dirichlet distribution with concentration 0.1 (the default split: most clients hold two or three classes),
# a quarter of the clients each round, K = 10 local steps each, the model tested on all 10 000 test images.
# Every field has a default; `help(fedlab.Config)` lists them.

# %%
config = fedlab.Config(model="mlp", train_size=3000, n_clients=20, participation=0.25, rounds=30, local_steps=10)

# %% [markdown]
# Train FedAvg and FedSAM on the same federation (same partition, same initial model, same clients and batches
# each round: the seed drives all of it) and plot the global model's accuracy after each round.

# %%
# NBVAL_CHECK_OUTPUT
for method in ("fedavg", "fedsam"):
    result = fedlab.run(config, algorithm=method, progress=False)
    print(method, result.status)
    plt.plot(result.metrics["round"], 100 * result.metrics["test_acc"], label=method)
plt.gca().set(xlabel="round", ylabel="test accuracy (%)", title="a smoke test: which curve ends on top is chance")
_ = plt.legend()  # assigned: Jupyter then prints no object under the figure

# %% [markdown]
# ## Where to go next
# * `01b_foundations` — FedAvg, client drift, SAM and FedSAM written from scratch and checked against `fedlab.run`.
# * `01_heterogeneity` — what "Dirichlet 0.1" means for the clients, and why two papers' "Dir-0.5" differ.
# * `02_flatness_incompatibility` — why a locally flat model need not be globally flat, and where on real data
#   local SAM does (or does not) fail.
# * `03`–`08` — the friendly adversary and the methods built to fix local SAM; `09` curvature and landscapes;
#   `10` the benchmark that judges them; `11` the newest methods.
#
# From the command line the same run is
# `python -m fedlab run --algorithm fedsam --model mlp --partition dirichlet --alpha 0.1`.

# %% [markdown]
# ## Exercises
#
# Predict first, then run. Each turns one knob of the cell above.
#
# 1. Add `alpha=10.0` to the `Config` (nearly IID clients). How far apart do the two curves end now, and how high?
#
# <details>
# <summary>Solution</summary>
#
# Both end higher and closer together: with α = 10 every client holds nearly all ten classes, so the local
# models hardly drift apart and their average is close to what one model trained on all the data would be.
# With α = 0.1 each client pulls the model towards its own two or three classes, and averaging such models
# costs accuracy (notebook 01 draws the splits; 01b computes the drift in closed form).
#
# </details>
#
# 2. Train FedSAM with radius zero: `fedlab.run(config, algorithm="fedsam", algorithm_params={"rho": 0.0})`.
#    Which curve should it lie exactly on top of, and why?
#
# <details>
# <summary>Solution</summary>
#
# FedAvg's, to the last digit, and so do the models (`torch.equal` of the two `result.theta` is `True`). With
# ρ = 0 the perturbation $0\cdot g/(\lVert g\rVert + 10^{-12})$ is the exact zero vector, so the second gradient
# is the first one computed again: the same numbers at twice the cost (the `cum_grad_evals` column doubles).
#
# </details>
#
# 3. Set `local_steps=40`. Every client now walks four times as far from the global model each round. Predict:
#    faster or slower progress per round, and does FedSAM fall behind FedAvg?
#
# <details>
# <summary>Solution</summary>
#
# Faster per round for both: more local work per round buys progress while the clients' own minima are still
# far away. The gap between the two changes sign from seed to seed (try `seed=1`, `seed=2`): at this size it is
# noise. The argument that more local work should hurt local SAM is about clients that reach their own minima;
# notebook 02 tests it on real data, over splits and K, with six seeds per cell.
#
# </details>
