"""Pre-registered studies: a design file of arms, cells, seeds, estimands and decision rules
(:mod:`lab.study.spec`), one runner that plans, estimates and trains it resumably from committed records
(:mod:`lab.study.runner`), and its analysis (:mod:`lab.study.analysis`). The failure map of issue 42 is the
first study on it (``lab/study/failure_map.yaml``)."""
