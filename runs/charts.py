"""Small bar charts, computed here and drawn as inline SVG by the templates.

Geometry only (numbers); the template writes the <rect> elements, so nothing here is
marked safe and CSP needs no inline style (SVG presentation attributes are not styles).
"""

from dataclasses import dataclass

WIDTH = 480
HEIGHT = 120
LABEL_SPACE = 16


@dataclass
class Bar:
    label: str
    value: float
    x: float
    y: float
    width: float
    height: float
    show_label: bool
    text: str


@dataclass
class Chart:
    title: str
    unit: str
    bars: list[Bar]
    total: float
    peak: float
    width: int = WIDTH
    height: int = HEIGHT

    @property
    def label_y(self) -> int:
        return self.height - 4

    @property
    def view_box(self) -> str:
        return f"0 0 {self.width} {self.height}"


def _fmt(value: float, unit: str) -> str:
    if unit == "USD":
        return f"${value:.4f}"
    return f"{value:g}"


def bars(points: list[tuple[str, float]], *, unit: str, title: str, every_label=False) -> Chart:
    plot = HEIGHT - LABEL_SPACE
    peak = max((v for _, v in points), default=0) or 1
    slot = WIDTH / max(len(points), 1)
    out = []
    for i, (label, value) in enumerate(points):
        h = plot * value / peak if value else 0
        out.append(
            Bar(
                label=label,
                value=value,
                x=round(i * slot + 1, 1),
                y=round(plot - h, 1),
                width=round(max(slot - 2, 1), 1),
                height=round(h, 1),
                show_label=every_label or i % 6 == 0,
                text=f"{label}: {_fmt(value, unit)} {unit}",
            )
        )
    return Chart(
        title=title,
        unit=unit,
        bars=out,
        total=sum(v for _, v in points),
        peak=max((v for _, v in points), default=0),
    )
