"""Cost-model fidelity: published measurements, their predictions, error statistics,
calibration fits and kernel checks.

* :mod:`.measurements` — the measurement table (CSV) and its row model;
* :mod:`.predict` — one row -> the cost model's value, with the row's own configuration;
* :mod:`.stats` — errors per metric kind and split, TP-sweep order, :func:`validate`;
* :mod:`.fit` — the declared calibration fits and the factors file they write
  (``data/calibration/factors.json``, read by :mod:`learn_to_shard.cost.config`);
* :mod:`.kernels` — the per-operator formulas against measured kernel tables.

Rendering (tables, plot, JSON report) is :mod:`learn_to_shard.report.validate`.
"""

from .fit import CALIBRATIONS, CalibrationResult, CalibrationSpec, calibrate, write_factors
from .kernels import KERNEL_FITS, KernelFit, OperatorStats, fit_silicon, silicon_report
from .measurements import COLUMNS, KINDS, METRIC_KIND, Measurement, load_table
from .predict import RowResult, predict_row
from .stats import ValidationReport, validate

__all__ = ["CALIBRATIONS", "CalibrationResult", "CalibrationSpec", "calibrate", "write_factors",
           "KERNEL_FITS", "KernelFit", "OperatorStats", "fit_silicon", "silicon_report",
           "COLUMNS", "KINDS", "METRIC_KIND", "Measurement", "load_table", "RowResult",
           "predict_row", "ValidationReport", "validate"]
