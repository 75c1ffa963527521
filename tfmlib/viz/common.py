"""Plot helpers shared by several notebooks."""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch


def heatmap(ax, matrix, x_labels=None, y_labels=None, *, title: str = "", xlabel: str = "",
            ylabel: str = "", cbar_label: str = "", cmap: str = "viridis", vmin=None, vmax=None,
            annotate: bool = False, colorbar: bool = True):
    """Draw a 2-D tensor or array as a labelled heatmap on `ax`; returns the image artist.

    Keep the returned artist and call `image.set_data(new)` to redraw fast in a widget.
    """
    if isinstance(matrix, torch.Tensor):
        matrix = matrix.detach().cpu().float().numpy()
    image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), labels=list(x_labels), rotation=45, ha="right")
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), labels=list(y_labels))
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if annotate:
        for (row, col), value in _cells(matrix):
            ax.text(col, row, f"{value:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if value < (matrix.max() + matrix.min()) / 2 else "black")
    if colorbar:
        bar = ax.figure.colorbar(image, ax=ax)
        bar.set_label(cbar_label)
    return image


def _cells(matrix):
    rows, cols = matrix.shape
    for row in range(rows):
        for col in range(cols):
            yield (row, col), float(matrix[row, col])


def save_and_show(fig, path=None):
    """Show a figure inline, saving it first when a path is given (for looking at plots offline)."""
    if path is not None:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.show()
