"""The star rating picker's contrast, computed from static/css/shop.css as WCAG 2.2 defines it.

The radio inputs are invisible, so the stars alone show which rating is chosen. WCAG 1.4.11 (non-text
contrast) asks 3:1 against the adjacent colour for a control's visual state indicators and for its
focus indicator. The picker sits on the comment form's background. tests/comments/test_browser.py
checks the same styles as Chromium computes them."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

CSS = Path(__file__).resolve().parents[2] / "static" / "css" / "shop.css"
MINIMUM = 3.0  # WCAG 1.4.11


def rules(css: str) -> list[tuple[str, dict]]:
    """(selector, declarations) for every rule, in order; an @media block's rules included."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    found = []
    for selector, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        declarations = {}
        for declaration in body.split(";"):
            if ":" in declaration:
                name, value = declaration.split(":", 1)
                declarations[name.strip()] = value.strip()
        found.append((" ".join(selector.split()), declarations))
    return found


class Stylesheet:
    def __init__(self, css: str):
        self.rules = rules(css)
        self.variables = {name: value for selector, declarations in self.rules if selector == ":root"
                          for name, value in declarations.items() if name.startswith("--")}

    def resolve(self, value: str) -> str:
        while match := re.search(r"var\((--[\w-]+)\)", value):
            value = value[:match.start()] + self.variables[match.group(1)] + value[match.end():]
        return value

    def rule(self, predicate) -> dict:
        """The declarations of the one rule whose selector satisfies `predicate`."""
        matching = [declarations for selector, declarations in self.rules if predicate(selector)]
        assert len(matching) == 1, f"{len(matching)} rules match"
        return {name: self.resolve(value) for name, value in matching[0].items()}


def colour(value: str) -> tuple[int, int, int]:
    match = re.search(r"#([0-9a-fA-F]{6}|[0-9a-fA-F]{3})\b", value)
    assert match, f"no hex colour in {value!r}"
    digits = match.group(1)
    if len(digits) == 3:
        digits = "".join(d * 2 for d in digits)
    return tuple(int(digits[i:i + 2], 16) for i in (0, 2, 4))


def relative_luminance(rgb: tuple[int, int, int]) -> float:
    def linear(channel: int) -> float:
        c = channel / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = map(linear, rgb)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    high, low = sorted((relative_luminance(a), relative_luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def stroke(declarations: dict) -> tuple[int, int, int] | None:
    """The star's outline colour, if it has one (-webkit-text-stroke-color, or the shorthand's)."""
    value = declarations.get("-webkit-text-stroke-color") or declarations.get("-webkit-text-stroke")
    return colour(value) if value else None


@pytest.fixture(scope="module")
def sheet():
    return Stylesheet(CSS.read_text())


@pytest.fixture(scope="module")
def background(sheet):
    return colour(sheet.rule(lambda s: s == ".comment-form")["background"])


def test_the_formula_matches_wcags_reference_values():
    assert contrast((0, 0, 0), (255, 255, 255)) == pytest.approx(21.0)
    assert contrast((0x76, 0x76, 0x76), (255, 255, 255)) == pytest.approx(4.54, abs=0.01)
    # The picker before issue 16: unlit #b9c0c8 and lit #e0a100 on #f6f8fa.
    assert contrast(colour("#b9c0c8"), colour("#f6f8fa")) == pytest.approx(1.72, abs=0.01)
    assert contrast(colour("#e0a100"), colour("#f6f8fa")) == pytest.approx(2.13, abs=0.01)


def test_an_unlit_star_has_3_to_1(sheet, background):
    unlit = sheet.rule(lambda s: s == ".star-picker label")
    indicator = stroke(unlit) or colour(unlit["color"])  # an outlined star shows by its outline
    assert contrast(indicator, background) >= MINIMUM, contrast(indicator, background)
    # Hovering the picker puts the unlit look back on the stars after the pointer.
    reset = sheet.rule(lambda s: s == ".star-picker:hover label")
    assert (stroke(reset) or colour(reset["color"])) == indicator


def test_a_lit_star_has_3_to_1_and_looks_unlike_an_unlit_one(sheet, background):
    unlit = sheet.rule(lambda s: s == ".star-picker label")
    for selector in ("input:checked", "label:hover"):
        lit = sheet.rule(lambda s, selector=selector: s.startswith(".star-picker") and selector in s)
        fill, outline = colour(lit["color"]), stroke(lit) or colour(lit["color"])
        assert contrast(fill, background) >= MINIMUM, (selector, contrast(fill, background))
        assert fill == outline, f"{selector}: a lit star is filled with its outline's colour"
        # Not by colour alone: a lit star is filled, an unlit one is only an outline.
        assert colour(unlit["color"]) != stroke(unlit) and colour(unlit["color"]) != fill


def test_the_keyboard_focus_is_a_3_to_1_outline(sheet, background):
    focus = sheet.rule(lambda s: s.startswith(".star-picker") and "focus-visible" in s)
    width, style = focus["outline"].split()[:2]
    assert style == "solid" and float(width.removesuffix("px")) >= 2
    assert contrast(colour(focus["outline"]), background) >= MINIMUM, contrast(colour(focus["outline"]), background)
