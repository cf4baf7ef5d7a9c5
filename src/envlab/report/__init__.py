"""The HTML report: one self-contained file showing runs, their uncertainty, every episode."""

from envlab.report.html import ReportInfo, render_report, write_report

__all__ = ["ReportInfo", "render_report", "write_report"]
