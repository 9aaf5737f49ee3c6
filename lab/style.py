"""Each method's label and colour, stated once for every notebook, figure and claims table of the lab
(the house plot style, :mod:`lab.tools.plots`, draws with them).
"""
from __future__ import annotations

METHOD_ORDER = ("fedavg", "fedprox", "scaffold", "feddyn", "fedacg", "fedsam", "mofedsam", "fedgamma",
                "fedspeed", "fedsmoo", "fedsmoo_adaptive", "fedlesam", "fedswa", "fedmoswa", "fednsam",
                "fedvssam", "fedwmsam", "fedgloss", "fedgf", "fedgmt", "fedsol", "fedlesam_s", "fedlesam_d",
                "dp_fedavg", "dp_fedsam", "fedscar")
METHOD_LABELS = {"fedavg": "FedAvg", "fedprox": "FedProx", "scaffold": "SCAFFOLD", "feddyn": "FedDyn",
                 "fedacg": "FedACG", "fedsam": "FedSAM", "mofedsam": "MoFedSAM", "fedgamma": "FedGAMMA",
                 "fedspeed": "FedSpeed", "fedsmoo": "FedSMOO", "fedsmoo_adaptive": "FedSMOO (adaptive)",
                 "fedlesam": "FedLESAM", "fedswa": "FedSWA", "fedmoswa": "FedMoSWA", "fednsam": "FedNSAM",
                 "fedvssam": "FedVSSAM", "fedwmsam": "FedWMSAM", "fedgloss": "FedGloSS", "fedgf": "FedGF",
                 "fedgmt": "FedGMT", "fedsol": "FedSOL", "fedlesam_s": "FedLESAM-S", "fedlesam_d": "FedLESAM-D",
                 "dp_fedavg": "DP-FedAvg", "dp_fedsam": "DP-FedSAM", "fedscar": "FedScar"}
# one colour per method, no two alike (FedAvg black as the reference, FedProx the only grey)
PALETTE = ["#000000", "#8c8c8c", "#1f77b4", "#17becf", "#9467bd", "#ff7f0e", "#bcbd22", "#8c564b",
           "#e377c2", "#2ca02c", "#006d2c", "#b15928", "#1b9e77", "#393b79", "#e6ab02", "#d62728",
           "#f781bf", "#4daf4a", "#a6761d", "#fb9a99", "#6a3d9a", "#cab2d6", "#80b1d3", "#525252", "#fdbf6f",
           "#b2df8a"]
METHOD_COLORS = dict(zip(METHOD_ORDER, PALETTE))


def method_label(name: str) -> str:
    """The name a figure or table shows for ``name`` (the registry name itself if it has none)."""
    return METHOD_LABELS.get(name, name)


def method_color(name: str) -> str:
    """``name``'s colour in every figure (dark grey for a name that is not a method)."""
    return METHOD_COLORS.get(name, "#333333")
