"""Holiday calendar behind `get_date_holiday_info` and `get_holiday_date`.

Official behaviour (meituan-longcat/VitaBench-2.0 @ f60169e89f30499cb7883f3dad76bd03facc908d,
`src/vita/environment/toolkit.py`, `get_date_holiday_info` / `get_holiday_date`):
- `get_date_holiday_info(date)` returns the statutory holiday name from `holidays.China` for that date, or a
  "not a holiday" sentence;
- `get_holiday_date(year, name)` looks the name up by fuzzy partial-ratio (>= 80) in a per-year table of the
  festivals a few tasks needed, for 2023-2025 only (`OFFICIAL_HOLIDAYS`); another year answers "Holiday data for year
  X not found", an unknown name "Holiday named 'N' not found in year X" (answers, not errors).
That is the default (`holidays="official"`). `holidays="computed"` (a documented deviation) computes the same
festival names for any year instead: statutory dates from `holidays.China`, lunar festivals from the `holidays`
lunisolar anchors plus new moons (Meeus, "Astronomical Algorithms", ch. 49), the rest by their fixed rules. The
official tool reads the table of the run's language; both modes here accept English and Chinese names.
"""

import functools
import math
from datetime import date, datetime, timedelta

import holidays
from holidays.calendars.chinese import _ChineseLunisolar
from rapidfuzz import fuzz, process
from rapidfuzz.utils import default_process


BEIJING_UTC_OFFSET_DAYS = 8 / 24
SYNODIC_MONTH = 29.530588861


def _new_moon_jde(k: int) -> float:
    """Julian Ephemeris Day of lunation k (k = 0: 2000-01-06), Meeus eq. 49.1 with the main periodic terms."""
    t = k / 1236.85
    jde = 2451550.09766 + SYNODIC_MONTH * k + 0.00015437 * t**2 - 0.000000150 * t**3
    e = 1 - 0.002516 * t - 0.0000074 * t**2
    m = math.radians(2.5534 + 29.10535670 * k - 0.0000014 * t**2)
    mp = math.radians(201.5643 + 385.81693528 * k + 0.0107582 * t**2)
    f = math.radians(160.7108 + 390.67050284 * k - 0.0016118 * t**2)
    om = math.radians(124.7746 - 1.56375588 * k + 0.0020672 * t**2)
    jde += (
        -0.40720 * math.sin(mp)
        + 0.17241 * e * math.sin(m)
        + 0.01608 * math.sin(2 * mp)
        + 0.01039 * math.sin(2 * f)
        + 0.00739 * e * math.sin(mp - m)
        - 0.00514 * e * math.sin(mp + m)
        + 0.00208 * e * e * math.sin(2 * m)
        - 0.00111 * math.sin(mp - 2 * f)
        - 0.00057 * math.sin(mp + 2 * f)
        + 0.00056 * e * math.sin(2 * mp + m)
        - 0.00042 * math.sin(3 * mp)
        + 0.00042 * e * math.sin(m + 2 * f)
        + 0.00038 * e * math.sin(m - 2 * f)
        - 0.00024 * e * math.sin(2 * mp - m)
        - 0.00017 * math.sin(om)
    )
    return jde


def _jd_to_date(jd: float) -> date:
    return date(2000, 1, 1) + timedelta(days=math.floor(jd - 2451544.5))


def new_moon_day(near: date) -> date:
    """Beijing calendar day of the new moon closest to `near` (the first day of a lunar month)."""
    k = round((near - date(2000, 1, 6)).days / SYNODIC_MONTH)
    best = min(
        (_new_moon_jde(j) for j in (k - 1, k, k + 1)),
        key=lambda jde: abs(jde - (2451549.5 + (near - date(2000, 1, 6)).days)),
    )
    return _jd_to_date(best - 69.0 / 86400 + BEIJING_UTC_OFFSET_DAYS)  # TT -> UTC (delta T ~ 69 s) -> UTC+8


def _nth_weekday(year: int, month: int, weekday: int, n: int) -> date:
    first = date(year, month, 1)
    return first + timedelta(days=(weekday - first.weekday()) % 7 + 7 * (n - 1))


@functools.lru_cache(maxsize=64)
def festival_dates(year: int) -> dict[str, date]:
    """Every festival name the official `get_holiday_date` table uses, with its date in Gregorian `year`."""
    lunar = _ChineseLunisolar()
    lny = lunar.lunar_new_year_date(year)[0]
    mid_autumn = lunar.mid_autumn_date(year)[0]
    month2 = new_moon_day(lny + timedelta(days=30))
    month7 = new_moon_day(mid_autumn - timedelta(days=14 + 29))
    month12_prev = new_moon_day(lny - timedelta(days=29))  # Laba (12/8) of the lunar year ending in `year`
    statutory = {}
    for day, name in sorted(holidays.China(years=year).items()):
        statutory.setdefault(name, day)
    dates = {
        "New Year's Day": date(year, 1, 1),
        "Laba Festival": month12_prev + timedelta(days=7),
        "Spring Festival": lny,
        "Lantern Festival": lny + timedelta(days=14),
        "Valentine's Day": date(year, 2, 14),
        "Dragon Head Festival": month2 + timedelta(days=1),
        "Women's Day": date(year, 3, 8),
        "Qingming Festival": lunar.qingming_date(year)[0],
        "Labor Day": date(year, 5, 1),
        "Mother's Day": _nth_weekday(year, 5, 6, 2),
        "Dragon Boat Festival": lunar.dragon_boat_date(year)[0],
        "Father's Day": _nth_weekday(year, 6, 6, 3),
        "Party Founding Day": date(year, 7, 1),
        "Start of Autumn": _start_of_autumn(year),
        "Qixi Festival": month7 + timedelta(days=6),
        "Mid-Autumn Festival": mid_autumn,
        "National Day": date(year, 10, 1),
        "Double Ninth Festival": lunar.double_ninth_date(year)[0],
        "Winter Solstice": lunar.winter_solstice_date(year)[0],
        "Christmas Day": date(year, 12, 25),
    }
    dates.update({name: day for (y, name), day in OFFICIAL_TABLE_EXCEPTIONS.items() if y == year})
    for name, day in statutory.items():  # statutory names of the `holidays` package (e.g. "Tomb-Sweeping Day")
        if not name.startswith("Day off"):
            dates.setdefault(name, day)
    return dates


def _start_of_autumn(year: int) -> date:
    """Liqiu: the sun reaches ecliptic longitude 135 deg; 7 or 8 August in Beijing time (low-precision solar model)."""
    for day in (date(year, 8, 6), date(year, 8, 7), date(year, 8, 8)):
        end = datetime(day.year, day.month, day.day) + timedelta(days=1) - timedelta(hours=8)
        if _solar_longitude(end) >= 135.0:
            return day
    return date(year, 8, 8)


def _solar_longitude(when: datetime) -> float:
    """Apparent solar longitude in degrees at a UTC time (Meeus ch. 25, low accuracy: ~0.01 deg)."""
    jd = 2451545.0 + (when - datetime(2000, 1, 1, 12)).total_seconds() / 86400
    t = (jd - 2451545.0) / 36525
    l0 = 280.46646 + 36000.76983 * t
    m = math.radians(357.52911 + 35999.05029 * t)
    c = (1.914602 - 0.004817 * t) * math.sin(m) + 0.019993 * math.sin(2 * m) + 0.000289 * math.sin(3 * m)
    omega = math.radians(125.04 - 1934.136 * t)
    return (l0 + c - 0.00569 - 0.00478 * math.sin(omega)) % 360


# Where the official table's date differs from the computed one, the official date wins (tasks were written against
# it): its 2025 Lantern Festival is 15 February, the lunar rule (1st month, 15th day) gives 12 February.
OFFICIAL_TABLE_EXCEPTIONS = {(2025, "Lantern Festival"): date(2025, 2, 15)}
# Chinese names of the official Chinese table, mapped to the English names above.
CHINESE_NAMES = {
    "元旦节": "New Year's Day",
    "腊八节": "Laba Festival",
    "春节": "Spring Festival",
    "元宵节": "Lantern Festival",
    "情人节": "Valentine's Day",
    "龙头节": "Dragon Head Festival",
    "妇女节": "Women's Day",
    "清明节": "Qingming Festival",
    "劳动节": "Labor Day",
    "母亲节": "Mother's Day",
    "端午节": "Dragon Boat Festival",
    "父亲节": "Father's Day",
    "建党节": "Party Founding Day",
    "立秋": "Start of Autumn",
    "七夕节": "Qixi Festival",
    "中秋节": "Mid-Autumn Festival",
    "国庆节": "National Day",
    "重阳节": "Double Ninth Festival",
    "冬至": "Winter Solstice",
    "圣诞节": "Christmas Day",
}


# The official table (English names; its Chinese table holds the same festivals under `CHINESE_NAMES`).
OFFICIAL_HOLIDAYS = {
    2025: {
        "New Year's Day": "2025-01-01", "Start of Autumn": "2025-08-07", "Women's Day": "2025-03-08",
        "Laba Festival": "2025-01-07", "Dragon Head Festival": "2025-03-01", "Party Founding Day": "2025-07-01",
        "Qingming Festival": "2025-04-04", "Double Ninth Festival": "2025-10-29", "Dragon Boat Festival": "2025-05-31",
        "Mother's Day": "2025-05-11", "Lantern Festival": "2025-02-15", "Labor Day": "2025-05-01",
        "Qixi Festival": "2025-08-29", "Winter Solstice": "2025-12-21", "Christmas Day": "2025-12-25",
        "National Day": "2025-10-01", "Mid-Autumn Festival": "2025-10-06",
    },
    2024: {
        "Double Ninth Festival": "2024-10-11", "Qixi Festival": "2024-08-10", "Valentine's Day": "2024-02-14",
        "Qingming Festival": "2024-04-04", "Dragon Boat Festival": "2024-06-10", "Lantern Festival": "2024-02-24",
        "Mid-Autumn Festival": "2024-09-17",
    },
    2023: {
        "National Day": "2023-10-01", "Dragon Boat Festival": "2023-06-22", "Mid-Autumn Festival": "2023-09-29",
        "Qingming Festival": "2023-04-05", "Double Ninth Festival": "2023-10-23", "Father's Day": "2023-06-18",
    },
}  # fmt: skip
HOLIDAY_MODES = ("official", "computed")


def holiday_date(year: int, holiday_name: str, mode: str = "official") -> str | None:
    """Date (YYYY-MM-DD) of a festival by fuzzy name (partial ratio >= 80, as the official tool); None if unknown.
    `mode="official"` reads `OFFICIAL_HOLIDAYS` (callers check the year first), `"computed"` any year."""
    if mode == "official":
        table = {name: date.fromisoformat(day) for name, day in OFFICIAL_HOLIDAYS[int(year)].items()}
    else:
        table = festival_dates(int(year))
    chinese = [zh for zh, en in CHINESE_NAMES.items() if en in table]
    names = list(table) + chinese
    match = process.extractOne(holiday_name, names, scorer=fuzz.partial_ratio, processor=default_process)
    if match is None or round(match[1]) < 80:  # thefuzz scores are rounded integers
        return None
    name = CHINESE_NAMES.get(match[0], match[0])
    return table[name].isoformat()


def statutory_holiday(day: date) -> str | None:
    """Name of the statutory holiday (or adjusted day off) on `day` per `holidays.China`, else None."""
    return holidays.China(years=day.year).get(day)
