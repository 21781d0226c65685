"""SWE-bench-style evaluation: instances, predictions, an offline task set, a Docker grader, runner, compare."""

from nexus.evals.swebench.instances import Instance, LoadResult, load_instances
from nexus.evals.swebench.predictions import Prediction, load_predictions, write_predictions

__all__ = ["Instance", "LoadResult", "load_instances", "Prediction", "load_predictions", "write_predictions"]
