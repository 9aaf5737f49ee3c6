"""Pre-registered studies: a design file of arms, cells, seeds, estimands and decision rules read and registered
one way (:mod:`lab.study.spec`), one worker pool and record writer (:mod:`lab.study.workers`), one runner that
plans, estimates and trains a study resumably from committed records (:mod:`lab.study.runner`), and its analysis.
The failure map of issue 42 (``lab/study/failure_map.yaml``) and the regime pilot (``lab/regime/``) use them."""
