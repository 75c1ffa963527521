"""Plots and widgets for the notebooks, one module per topic. The math never imports these."""
