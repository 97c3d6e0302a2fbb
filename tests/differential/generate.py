"""Seeded generator of small inputs and streaming queries for the differential test.

`case(seed)` gives one case: the CSV files of its input tables, the DDL, one query (text
printed with Calcite's operator precedence, so that both engines must parse it alike) and
the query family. Everything is drawn from `random.Random(seed)`: the same seed always gives
the same case. The grammar covers what Sluice runs: projections and predicates, window TVF
aggregates (TUMBLE, HOP, CUMULATE, SESSION), updating aggregates and aggregates over them,
MATCH_RECOGNIZE, regular and interval joins, OVER aggregates, Top-N, deduplication and
UNION ALL. Where Sluice deliberately differs from Flink (../../README.md, "Where Sluice
differs from Flink"), the generator either stays clear of the difference (noted at each
place) or tags the case so that `run.py` can recognize it.

Input table `t` (and `u` for joins): `id INT` (row number), `k STRING`, `g INT`, `v INT`,
`d DOUBLE`, `b BOOLEAN`, `s STRING`, `ts TIMESTAMP(3)` with a watermark `ts - delay`.
Rows are processed in file order with a watermark per row (cases README rules 1 and 2).
"""

import datetime
import random

BASE = datetime.datetime(2024, 1, 1, 0, 0, 0)
WORDS = ["ab", "abc", "b", "Ca", "x_y", "a%b", "ba", "AB", " a", "q"]
KEYS = ["a", "b", "c"]

# Calcite's operator precedence (SqlStdOperatorTable): higher binds tighter.
P_OR, P_AND, P_NOT, P_IS, P_CMP, P_PRED, P_ADD, P_MUL, P_NEG, P_ATOM = (
    22, 24, 26, 28, 30, 32, 40, 60, 80, 100)


class Node:
    """An expression: its text (fully formed) and the precedence of its top operator."""

    def __init__(self, text, prec, typ):
        self.text, self.prec, self.typ = text, prec, typ


def wrap(rng, node, need_parens):
    if need_parens or (node.prec < P_ATOM and rng.random() < 0.12):
        return "(" + node.text + ")"
    return node.text


def binary(rng, left, op, right, prec, typ):
    """A left-associative binary operator: the left operand keeps an equal precedence."""
    return Node("%s %s %s" % (wrap(rng, left, left.prec < prec), op,
                              wrap(rng, right, right.prec <= prec)), prec, typ)


def prefix(rng, op, x, prec, typ):
    text = wrap(rng, x, x.prec < prec)
    if op == "-" and text.startswith("-"):
        text = " " + text  # "--" starts a comment
    return Node(op + (" " if op == "NOT" else "") + text, prec, typ)


def postfix(rng, x, op, typ="BOOLEAN"):
    return Node("%s %s" % (wrap(rng, x, x.prec < P_IS), op), P_IS, typ)


def atom(text, typ):
    return Node(text, P_ATOM, typ)


def lit_int(rng):
    n = rng.randint(-3, 10)
    return Node(str(n), P_NEG if n < 0 else P_ATOM, "INT")


class Exprs:
    """Typed random expressions over the columns of `t` (`prefix` qualifies them)."""

    def __init__(self, rng, qual=""):
        self.rng, self.q = rng, qual

    def col(self, name, typ):
        return atom(self.q + name, typ)

    def int_(self, depth=2):
        r = self.rng
        if depth <= 0 or r.random() < 0.35:
            return r.choice([lambda: self.col("v", "INT"), lambda: self.col("g", "INT"),
                             lambda: self.col("id", "INT"), lambda: lit_int(r)])()
        choice = r.randrange(13)
        if choice == 11:
            return atom(r.choice([
                "EXTRACT(SECOND FROM %s)", "MINUTE(%s)",
                "TIMESTAMPDIFF(SECOND, %s, TIMESTAMP '2024-01-01 00:00:10')"]) % self.ts_(depth - 1).text,
                "INT")
        if choice == 12:
            return atom(r.choice(["POSITION('a' IN %s)", "TRY_CAST(%s AS INT)"]) % self.str_(depth - 1).text,
                        "INT")
        if choice <= 2:
            op, prec = r.choice([("+", P_ADD), ("-", P_ADD), ("*", P_MUL)])
            return binary(r, self.int_(depth - 1), op, self.int_(depth - 1), prec, "INT")
        if choice == 3:
            return binary(r, self.int_(depth - 1), r.choice(["%", "/"]),
                          atom(str(r.choice([2, 3, 4, -3])), "INT"), P_MUL, "INT")
        if choice == 4:
            return prefix(r, "-", self.int_(depth - 1), P_NEG, "INT")
        if choice == 5:
            return atom("ABS(%s)" % self.int_(depth - 1).text, "INT")
        if choice == 6:
            return atom("COALESCE(%s, %s)" % (self.int_(depth - 1).text, lit_int(r).text), "INT")
        if choice == 7:
            return atom("CASE WHEN %s THEN %s ELSE %s END" % (
                self.bool_(depth - 1).text, self.int_(depth - 1).text,
                self.int_(depth - 1).text), "INT")
        if choice == 8:
            return atom("CHAR_LENGTH(%s)" % self.str_(depth - 1).text, "INT")
        if choice == 9:
            return atom("MOD(%s, %d)" % (self.int_(depth - 1).text, r.choice([2, 3, -2])), "INT")
        return atom("NULLIF(%s, %s)" % (self.int_(depth - 1).text, lit_int(r).text), "INT")

    def str_(self, depth=2):
        r = self.rng
        if depth <= 0 or r.random() < 0.4:
            return r.choice([lambda: self.col("s", "STRING"), lambda: self.col("k", "STRING"),
                             lambda: atom("'%s'" % r.choice(WORDS), "STRING")])()
        choice = r.randrange(9)
        if choice == 6:
            return atom("DATE_FORMAT(%s, '%s')" % (self.ts_(depth - 1).text, r.choice(
                ["HH:mm:ss", "yyyy-MM-dd HH:mm", "mm:ss.SSS", "EEE"])), "STRING")
        if choice == 7:
            return atom(r.choice(["CAST(%s AS STRING)", "CAST(%s AS STRING)"]) % r.choice(
                [self.int_, self.ts_, self.double, self.bool_])(depth - 1).text, "STRING")
        if choice == 8:
            x = self.str_(depth - 1).text
            return atom(r.choice(["REPLACE(%s, 'a', 'zz')" % x, "REGEXP_REPLACE(%s, '[ab]', '_')" % x,
                                  "LPAD(%s, 4, '*')" % x, "REVERSE(%s)" % x,
                                  "SPLIT_INDEX(%s, 'b', 0)" % x, "INITCAP(%s)" % x]), "STRING")
        if choice == 0:
            return binary(r, self.str_(depth - 1), "||", self.str_(depth - 1), P_MUL, "STRING")
        if choice == 1:
            return atom("%s(%s)" % (r.choice(["UPPER", "LOWER", "TRIM"]),
                                    self.str_(depth - 1).text), "STRING")
        if choice == 2:
            return atom("SUBSTRING(%s, %d, %d)" % (self.str_(depth - 1).text, r.randint(0, 3),
                                                   r.randint(0, 3)), "STRING")
        if choice == 3:
            return atom("COALESCE(%s, 'z')" % self.str_(depth - 1).text, "STRING")
        if choice == 4:
            return atom("CONCAT(%s, %s)" % (self.str_(depth - 1).text,
                                             self.str_(depth - 1).text), "STRING")
        return atom("CASE WHEN %s THEN %s END" % (self.bool_(depth - 1).text,
                                                  self.str_(depth - 1).text), "STRING")

    def double(self, depth=1):
        r = self.rng
        if depth <= 0 or r.random() < 0.4:
            return self.col("d", "DOUBLE")
        choice = r.randrange(4)
        if choice == 0:
            return binary(r, self.double(depth - 1), r.choice(["+", "-"]),
                          atom(r.choice(["1.5", "2", "0.25"]), "DOUBLE"), P_ADD, "DOUBLE")
        if choice == 1:
            return binary(r, self.double(depth - 1), "*", atom("2", "INT"), P_MUL, "DOUBLE")
        if choice == 2:
            return atom("ROUND(%s, 1)" % self.double(depth - 1).text, "DOUBLE")
        return atom("CAST(%s AS DOUBLE)" % self.int_(depth - 1).text, "DOUBLE")

    def ts_(self, depth=1):
        r = self.rng
        if depth <= 0 or r.random() < 0.4:
            return self.col("ts", "TIMESTAMP")
        choice = r.randrange(4)
        if choice == 0:
            return atom("%s(%s TO %s)" % (r.choice(["FLOOR", "CEIL"]), self.ts_(depth - 1).text,
                                          r.choice(["SECOND", "MINUTE"])), "TIMESTAMP")
        if choice == 1:
            return binary(r, self.ts_(depth - 1), r.choice(["+", "-"]),
                          atom("INTERVAL '%d' SECOND" % r.randint(1, 9), "INTERVAL"), P_ADD,
                          "TIMESTAMP")
        if choice == 2:
            return atom("TIMESTAMPADD(SECOND, %s, %s)" % (self.int_(0).text, self.ts_(depth - 1).text),
                        "TIMESTAMP")
        return atom("TIMESTAMP '2024-01-01 00:00:%02d'" % r.randint(0, 30), "TIMESTAMP")

    def bool_(self, depth=2):
        r = self.rng
        if depth <= 0 or r.random() < 0.15:
            return r.choice([lambda: self.col("b", "BOOLEAN"),
                             lambda: atom(r.choice(["TRUE", "FALSE"]), "BOOLEAN")])()
        choice = r.randrange(16)
        if choice <= 2:
            return binary(r, self.int_(depth - 1), r.choice(["=", "<>", "<", "<=", ">", ">="]),
                          self.int_(depth - 1), P_CMP, "BOOLEAN")
        if choice == 3:
            return binary(r, self.bool_(depth - 1), "AND", self.bool_(depth - 1), P_AND,
                          "BOOLEAN")
        if choice == 4:
            return binary(r, self.bool_(depth - 1), "OR", self.bool_(depth - 1), P_OR, "BOOLEAN")
        if choice == 5:
            return prefix(r, "NOT", self.bool_(depth - 1), P_NOT, "BOOLEAN")
        if choice == 6:
            x = r.choice([self.int_, self.str_])(depth - 1)
            return postfix(r, x, r.choice(["IS NULL", "IS NOT NULL"]))
        if choice == 7:
            return postfix(r, self.bool_(depth - 1),
                           r.choice(["IS TRUE", "IS FALSE", "IS NOT TRUE", "IS UNKNOWN",
                                     "IS NOT FALSE", "IS NOT UNKNOWN"]))
        if choice == 8:
            return binary(r, self.int_(depth - 1),
                          r.choice(["IS DISTINCT FROM", "IS NOT DISTINCT FROM"]),
                          self.int_(depth - 1), P_CMP, "BOOLEAN")
        if choice == 9:
            x = self.int_(depth - 1)
            kind = r.choice(["BETWEEN", "NOT BETWEEN", "BETWEEN SYMMETRIC"])
            lo, hi = self.int_(depth - 1), self.int_(depth - 1)
            return Node("%s %s %s AND %s" % (wrap(r, x, x.prec <= P_PRED), kind,
                                             wrap(r, lo, lo.prec <= P_PRED),
                                             wrap(r, hi, hi.prec <= P_PRED)), P_PRED, "BOOLEAN")
        if choice == 10:
            x = self.int_(depth - 1)
            items = ", ".join(lit_int(r).text for _ in range(r.randint(1, 3)))
            if r.random() < 0.2:
                items += ", NULL"
            return Node("%s %s (%s)" % (wrap(r, x, x.prec <= P_PRED),
                                        r.choice(["IN", "NOT IN"]), items), P_PRED, "BOOLEAN")
        if choice == 11:
            x = self.str_(depth - 1)
            pat = r.choice(["a%", "%b", "_b%", "%a%", "x!_y", "a!%b", "%"])
            esc = " ESCAPE '!'" if "!" in pat else ""
            return Node("%s %s '%s'%s" % (wrap(r, x, x.prec <= P_PRED),
                                          r.choice(["LIKE", "NOT LIKE"]), pat, esc),
                        P_PRED, "BOOLEAN")
        if choice == 12:
            return binary(r, self.str_(depth - 1), r.choice(["=", "<>", "<", ">="]),
                          self.str_(depth - 1), P_CMP, "BOOLEAN")
        if choice == 13:
            return binary(r, self.ts_(depth - 1), r.choice(["<", ">=", "=", "<>"]),
                          self.ts_(depth - 1), P_CMP, "BOOLEAN")
        return binary(r, self.double(depth - 1), r.choice(["<", ">=", "="]),
                      atom(r.choice(["1.5", "0", "10"]), "DOUBLE"), P_CMP, "BOOLEAN")


def timestamps(rng, n, mode):
    """`n` event times in arrival order, in whole seconds from BASE (plus .001/.999 ms
    edges unless `mode` is 'mr'). Modes: 'ordered' (non-decreasing), 'unique' (strictly
    increasing), 'disorder' (some rows go back in time), 'mr' (disorder, whole seconds)."""
    out, t = [], 0.0
    for _ in range(n):
        step = rng.choice([1, 2, 3]) if mode.startswith("unique") else rng.choice([0, 1, 1, 2, 3, 5, 8])
        t += step
        x = t
        if mode == "unique_disorder" and rng.random() < 0.25:
            # + .5 and a thousandth per row: never equal to another row's time
            x = t - rng.randint(1, 6) + 0.5 + len(out) * 0.001
        if mode in ("disorder", "mr") and rng.random() < 0.25:
            x = max(0.0, t - rng.randint(1, 7))
        if mode in ("ordered", "disorder") and rng.random() < 0.1:
            x += rng.choice([0.001, 0.999])
        out.append(x)
    return out


def fmt_ts(sec):
    t = BASE + datetime.timedelta(milliseconds=round(sec * 1000))
    return t.strftime("%Y-%m-%d %H:%M:%S") + ".%03d" % (t.microsecond // 1000)


def table_rows(rng, n, mode):
    rows = []
    for i, ts in enumerate(timestamps(rng, n, mode)):
        def maybe(x, p=0.12):
            return "" if rng.random() < p else x
        rows.append([str(i + 1), maybe(rng.choice(KEYS), 0.08), maybe(str(rng.randint(0, 3))),
                     maybe(str(rng.randint(-3, 12))),
                     maybe("%.2f" % rng.uniform(-5, 20)), maybe(rng.choice(["true", "false"])),
                     maybe(rng.choice(WORDS)), fmt_ts(ts)])
    return rows


def ddl(name, delay):
    return ("CREATE TABLE %s (id INT, k STRING, g INT, v INT, d DOUBLE, b BOOLEAN, s STRING, "
            "ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '%s' SECOND) WITH ("
            "'connector' = 'filesystem', 'path' = '${DIR}/%s.csv', 'format' = 'csv', "
            "'csv.null-literal' = '')" % (name, delay, name))


AGGS_INT = ["COUNT(*)", "COUNT(v)", "SUM(v)", "MIN(v)", "MAX(v)", "AVG(v)", "SUM(g)",
            "COUNT(DISTINCT k)", "MAX(s)", "MIN(s)", "SUM(d)", "MAX(d)", "COUNT(b)",
            "COUNT(DISTINCT v)", "SUM(DISTINCT g)", "AVG(d)", "STDDEV_POP(d)", "FIRST_VALUE(v)",
            "LAST_VALUE(s)", "MIN(ts)", "MAX(ts)"]


def aggs(rng, n=None, e=None, merging=False):
    """Aggregate calls. `merging`: for windows Flink merges (HOP, CUMULATE, SESSION), where Flink 2.3
    refuses FIRST_VALUE / LAST_VALUE (no `merge` method) and SUM(DISTINCT) ("does not support
    retraction"); Sluice runs them."""
    pool = [a for a in AGGS_INT
            if not (merging and a.startswith(("FIRST_VALUE", "LAST_VALUE", "SUM(DISTINCT")))]
    chosen = rng.sample(pool, n or rng.randint(1, 4))
    if e is not None and rng.random() < 0.4:
        chosen.append("SUM(%s)" % e.int_(1).text)
    if e is not None and rng.random() < 0.25:
        chosen.append("COUNT(*) FILTER (WHERE %s)" % e.bool_(1).text)
    return ", ".join("%s AS a%d" % (a, i) for i, a in enumerate(chosen))


def where(rng, e, p=0.5):
    return " WHERE " + e.bool_(2).text if rng.random() < p else ""


def q_project(rng):
    e = Exprs(rng)
    cols = []
    for i in range(rng.randint(1, 4)):
        f = rng.choice([e.int_, e.int_, e.bool_, e.str_, e.double, e.ts_])
        text = f(3 if f not in (e.double, e.ts_) else 1).text
        if f == e.ts_:
            # Flink refuses a result with two event-time attribute columns (ts twice).
            text = "CAST(%s AS TIMESTAMP(3))" % text
        cols.append("%s AS c%d" % (text, i))
    return "SELECT id, %s FROM t%s" % (", ".join(cols), where(rng, e, 0.7)), {}


def tvf(rng, partition=False):
    w = rng.choice([2, 3, 5, 10])
    kind = rng.choice(["TUMBLE", "TUMBLE", "HOP", "CUMULATE", "SESSION"])
    if kind == "TUMBLE":
        off = ", INTERVAL '1' SECOND" if rng.random() < 0.2 else ""
        return "TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '%d' SECOND%s)" % (w, off), kind
    if kind == "HOP":
        slide = rng.choice([s for s in [1, 2, 5] if w % s == 0 and s < w] or [1])
        return "HOP(TABLE t, DESCRIPTOR(ts), INTERVAL '%d' SECOND, INTERVAL '%d' SECOND)" % (
            slide, w), kind
    if kind == "CUMULATE":
        step = rng.choice([s for s in [1, 2, 5] if w % s == 0 and s < w] or [1])
        return ("CUMULATE(TABLE t, DESCRIPTOR(ts), INTERVAL '%d' SECOND, INTERVAL '%d' SECOND)"
                % (step, w), kind)
    part = " PARTITION BY k" if partition else ""
    return "SESSION(TABLE t%s, DESCRIPTOR(ts), INTERVAL '%d' SECOND)" % (part, rng.choice([2, 3, 5])), kind


def q_window(rng):
    e = Exprs(rng)
    by_key = rng.random() < 0.6
    fn, kind = tvf(rng, partition=by_key)
    keys = ", k" if by_key else ""
    having = " HAVING COUNT(*) > 1" if rng.random() < 0.2 else ""
    # Sluice plans a SESSION aggregate only straight over the TVF (a clear error says so).
    filt = where(rng, e, 0.3) if kind != "SESSION" else ""
    q = "SELECT window_start, window_end%s, %s FROM TABLE(%s)%s GROUP BY window_start, window_end%s%s" % (
        keys, aggs(rng, e=e if kind != "SESSION" else None, merging=kind != "TUMBLE"),
        fn, filt, keys, having)
    return q, {}


def q_group(rng):
    e = Exprs(rng)
    keys = rng.choice([["k"], ["g"], ["k", "b"], ["g % 2"], []])
    sel = ", ".join("%s AS k%d" % (k, i) for i, k in enumerate(keys))
    having = " HAVING COUNT(*) > 1" if keys and rng.random() < 0.3 else ""
    group = " GROUP BY " + ", ".join(keys) if keys else ""
    q = "SELECT %s%s FROM t%s%s%s" % (sel + ", " if sel else "", aggs(rng, e=e),
                                      where(rng, e, 0.4), group, having)
    return q, {"global_agg": not keys}


def q_agg_of_agg(rng):
    e = Exprs(rng)
    inner = "SELECT k, COUNT(*) AS c, SUM(v) AS sv, MAX(v) AS mv FROM t%s GROUP BY k" % where(rng, e, 0.4)
    outer = rng.choice([
        ("SELECT c, COUNT(*) AS n, SUM(sv) AS total FROM (%s) GROUP BY c", False),
        ("SELECT SUM(c) AS n, MAX(mv) AS m, MIN(sv) AS lo, COUNT(*) AS n_groups FROM (%s)", True),
        ("SELECT mv, COUNT(*) AS n FROM (%s) WHERE c > 1 GROUP BY mv", False),
    ])
    return outer[0] % inner, {"global_agg": outer[1]}


def q_match(rng):
    """Variables alternate between two exclusive conditions (X: v > T, Y: v <= T), and the
    quantifiers are plain, `+` or `{n,m}` with the last variable plain: no match depends on
    a greedy quantifier giving rows back (cases README rule 8, where Flink's CEP differs)."""
    t = rng.randint(2, 7)
    x, y = "v > %d" % t, "v <= %d" % t
    n = rng.randint(2, 4)
    names = ["A", "B", "C", "D"][:n]
    first = rng.random() < 0.5
    conds, pat = [], []
    for i, name in enumerate(names):
        conds.append("%s AS %s" % (name, x if (i % 2 == 0) == first else y))
        q = "" if i == n - 1 else rng.choice(["", "+", "+", "{1,2}", "{2}"])
        pat.append(name + q)
    measures = ["FIRST(A.id) AS first_id", "LAST(%s.id) AS last_id" % names[-1],
                "COUNT(B.v) AS nb", "SUM(A.v) AS sa", "MAX(B.ts) AS max_b_ts",
                "A.ts AS a_ts"]
    skip = rng.choice(["PAST LAST ROW", "TO NEXT ROW"])
    within = " WITHIN INTERVAL '%d' SECOND" % rng.choice([5, 10]) if rng.random() < 0.2 else ""
    part = "PARTITION BY k " if rng.random() < 0.7 else ""
    q = ("SELECT * FROM t MATCH_RECOGNIZE (%sORDER BY ts MEASURES %s ONE ROW PER MATCH "
         "AFTER MATCH SKIP %s PATTERN (%s)%s DEFINE %s)") % (
        part, ", ".join(rng.sample(measures, rng.randint(1, 3))), skip, " ".join(pat), within,
        ", ".join(conds))
    return q, {}


def q_join(rng):
    e = Exprs(rng, "t.")
    kind = rng.choice(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "INTERVAL"])
    cols = "t.id AS tid, u.id AS uid, t.v + u.v AS vv, u.s"
    if kind == "INTERVAL":
        lo, hi = rng.randint(0, 3), rng.randint(0, 3)
        cond = "t.k = u.k AND u.ts BETWEEN t.ts - INTERVAL '%d' SECOND AND t.ts + INTERVAL '%d' SECOND" % (lo, hi)
        return "SELECT %s FROM t JOIN u ON %s%s" % (cols, cond, where(rng, e, 0.3)), {"two_inputs": True}
    extra = " AND t.v < u.v" if rng.random() < 0.3 else ""
    return "SELECT %s FROM t %s u ON t.k = u.k%s%s" % (cols, kind, extra, where(rng, e, 0.3)), {
        "two_inputs": True}


def q_over(rng):
    frame = rng.choice(["ROWS BETWEEN %d PRECEDING AND CURRENT ROW" % rng.randint(0, 3),
                        "RANGE BETWEEN INTERVAL '%d' SECOND PRECEDING AND CURRENT ROW" % rng.randint(0, 5),
                        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW",
                        "RANGE BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW"])
    calls = rng.sample(["SUM(v)", "COUNT(v)", "MAX(v)", "MIN(s)", "COUNT(*)", "AVG(v)"],
                       rng.randint(1, 3))
    part = "PARTITION BY k " if rng.random() < 0.7 else ""
    sel = ", ".join("%s OVER w AS o%d" % (c, i) for i, c in enumerate(calls))
    # Flink 2.3's OVER drops a row at or behind the watermark (seen for unbounded and RANGE
    # frames), Sluice keeps it while it can still be placed (README); run.py checks that
    # this is the only difference.
    return "SELECT id, k, v, %s FROM t WINDOW w AS (%sORDER BY ts %s)" % (sel, part, frame), {
        "flink_drops_late": True}


def q_topn(rng):
    n = rng.randint(1, 3)
    order = rng.choice(["v DESC", "v", "s DESC", "g, v"])
    keep_rn = rng.random() < 0.5
    filt = rng.choice(["rn <= %d" % n, "rn < %d" % (n + 1), "rn = 1"])
    inner = "SELECT id, k, v, s, ROW_NUMBER() OVER (PARTITION BY k ORDER BY %s) AS rn FROM t" % order
    if rng.random() < 0.3:
        inner = inner.replace("FROM t", "FROM (SELECT * FROM t WHERE v IS NOT NULL)")
    top1 = filt == "rn = 1" or n == 1
    tags = {"top1_key": 1} if top1 else {}
    return "SELECT id, k, v, s%s FROM (%s) WHERE %s" % (", rn" if keep_rn else "", inner, filt), tags


def q_dedup(rng):
    """Deduplication on event time; the input's timestamps are unique, so no tie decides
    which row is kept (keep-last ties differ from Flink on purpose, README)."""
    order = rng.choice(["ts", "ts DESC"])
    part = rng.choice(["k", "g"])
    q = ("SELECT id, k, g, v FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY %s ORDER BY %s) AS rn "
         "FROM t) WHERE rn = 1") % (part, order)
    # Flink's row-time deduplication drops a row behind the watermark (run.py checks).
    return q, {"unique_ts": True, "flink_drops_late": True}


def q_union(rng):
    e = Exprs(rng)
    return "SELECT id, v FROM t WHERE %s UNION ALL SELECT id, g FROM t WHERE %s" % (
        e.bool_(2).text, e.bool_(2).text), {}


def q_distinct(rng):
    e = Exprs(rng)
    return "SELECT DISTINCT %s FROM t%s" % (rng.choice(["k", "k, g", "g % 2 AS parity, b"]),
                                           where(rng, e, 0.3)), {}


def q_join_agg(rng):
    """An aggregate over a join (an updating input when the join is outer)."""
    e = Exprs(rng, "t.")
    kind = rng.choice(["JOIN", "LEFT JOIN", "FULL JOIN"])
    q = ("SELECT t.k, COUNT(*) AS n, SUM(u.v) AS su, MAX(t.v) AS mt, COUNT(u.id) AS nu FROM t %s u "
         "ON t.k = u.k%s GROUP BY t.k") % (kind, where(rng, e, 0.3))
    return q, {"two_inputs": True}


def q_join_of_aggs(rng):
    """A join of two updating aggregates."""
    kind = rng.choice(["JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN"])
    q = ("SELECT x.k, x.c, y.m, y.k AS yk FROM (SELECT k, COUNT(*) AS c FROM t GROUP BY k) x %s "
         "(SELECT k, MAX(v) AS m FROM u WHERE v IS NOT NULL GROUP BY k) y ON x.k = y.k") % kind
    return q, {"two_inputs": True}


def window_agg(rng, table, size, aggs_text):
    return ("SELECT window_start, window_end, k, %s FROM TABLE(TUMBLE(TABLE %s, DESCRIPTOR(ts), "
            "INTERVAL '%d' SECOND)) GROUP BY window_start, window_end, k") % (aggs_text, table, size)


def q_window_join(rng):
    size = rng.choice([2, 5, 10])
    kind = rng.choice(["JOIN", "LEFT JOIN", "FULL JOIN"])
    left = window_agg(rng, "t", size, "COUNT(*) AS c, SUM(v) AS sv")
    right = window_agg(rng, "u", size, "MAX(v) AS mv")
    q = ("SELECT L.window_start, L.window_end, L.k, L.c, L.sv, R.mv, R.k AS rk FROM (%s) L %s (%s) R "
         "ON L.window_start = R.window_start AND L.window_end = R.window_end AND L.k = R.k") % (
        left, kind, right)
    return q, {"two_inputs": True}


def q_window_topn(rng):
    size = rng.choice([2, 5, 10])
    inner = window_agg(rng, "t", size, "COUNT(*) AS c, SUM(v) AS sv")
    order = rng.choice(["c DESC, k", "sv DESC, k", "k"])
    q = ("SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end "
         "ORDER BY %s) AS rn FROM (%s)) WHERE rn <= %d") % (order, inner, rng.randint(1, 2))
    return q, {}


def q_topn_updating(rng):
    """Top-N over an updating aggregate; the sort key ends in the group key, so no tie."""
    inner = "SELECT k, COUNT(*) AS c, SUM(v) AS sv FROM t GROUP BY k"
    order = rng.choice(["c DESC, k", "sv, k", "c, k DESC"])
    keep = rng.random() < 0.5
    q = ("SELECT k, c, sv%s FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY %s) AS rn FROM (%s)) "
         "WHERE rn <= %d") % (", rn" if keep else "", order, inner, rng.randint(1, 2))
    return q, {}


def cdc_events(rng, n):
    """A Debezium change stream of table `t`: inserts of new ids, updates (one or two
    fields changed, `before` the current row) and deletes, as JSON lines."""
    import json
    live, out, next_id = {}, [], 1

    def value(col):
        if rng.random() < 0.12:
            return None
        return {"k": lambda: rng.choice(KEYS), "g": lambda: rng.randint(0, 3),
                "v": lambda: rng.randint(-3, 12), "d": lambda: round(rng.uniform(-5, 20), 2),
                "b": lambda: rng.random() < 0.5, "s": lambda: rng.choice(WORDS),
                "ts": lambda: fmt_ts(rng.randint(0, 40))}[col]()

    cols = ["k", "g", "v", "d", "b", "s", "ts"]
    for _ in range(n):
        r = rng.random()
        if not live or r < 0.45:
            row = {"id": next_id}
            row.update({c: value(c) for c in cols})
            live[next_id] = row
            next_id += 1
            out.append({"before": None, "after": row, "op": rng.choice(["c", "r"])})
        elif r < 0.8:
            i = rng.choice(sorted(live))
            before, after = live[i], dict(live[i])
            for c in rng.sample(cols, rng.randint(1, 2)):
                after[c] = value(c)
            live[i] = after
            out.append({"before": before, "after": after, "op": "u"})
        else:
            i = rng.choice(sorted(live))
            out.append({"before": live.pop(i), "after": None, "op": "d"})
    return "".join(json.dumps(e) + "\n" for e in out)


def q_cdc(rng):
    """Queries over a table read as a changelog (`'format' = 'debezium-json'`)."""
    e = Exprs(rng)
    choice = rng.randrange(6)
    if choice == 0:
        q = "SELECT id, k, v, s FROM t%s" % where(rng, e, 0.6)
    elif choice == 1:
        q = "SELECT k, %s FROM t%s GROUP BY k" % (aggs(rng, e=e), where(rng, e, 0.3))
    elif choice == 2:
        q = ("SELECT k, c, sv FROM (SELECT *, ROW_NUMBER() OVER (ORDER BY c DESC, k) AS rn FROM "
             "(SELECT k, COUNT(*) AS c, SUM(v) AS sv FROM t GROUP BY k)) WHERE rn <= 2")
    elif choice == 3:
        q = ("SELECT t.id, t.v, u.id AS uid, u.v AS uv FROM t %s u ON t.k = u.k" %
             rng.choice(["JOIN", "LEFT JOIN", "FULL JOIN"]))
        return q, {"cdc": True, "two_inputs": True}
    elif choice == 4:
        q = "SELECT DISTINCT k, g FROM t%s" % where(rng, e, 0.3)
    else:
        q = ("SELECT id, k, v, rn FROM (SELECT id, k, v, ROW_NUMBER() OVER (PARTITION BY k "
             "ORDER BY v DESC, id) AS rn FROM t) WHERE rn <= 2")
    return q, {"cdc": True}


FAMILIES = [("project", q_project, 4), ("window", q_window, 3), ("group", q_group, 2),
            ("agg_of_agg", q_agg_of_agg, 1), ("match", q_match, 2), ("join", q_join, 2),
            ("over", q_over, 1), ("topn", q_topn, 1), ("dedup", q_dedup, 1), ("union", q_union, 1),
            ("distinct", q_distinct, 1), ("join_agg", q_join_agg, 1),
            ("join_of_aggs", q_join_of_aggs, 1), ("window_join", q_window_join, 1),
            ("window_topn", q_window_topn, 1), ("topn_updating", q_topn_updating, 1),
            ("cdc", q_cdc, 2)]


def case(seed):
    """The case of `seed`: {'family', 'query', 'ddl': [...], 'files': {name: csv text},
    'tags': {...}}."""
    rng = random.Random(seed)
    names = [f[0] for f in FAMILIES]
    family = rng.choices(names, weights=[f[2] for f in FAMILIES])[0]
    query, tags = dict((f[0], f[1]) for f in FAMILIES)[family](rng)
    if family == "match":
        mode, delay = "mr", rng.choice(["0.5", "1.5", "3.5"])
    elif tags.get("unique_ts"):
        mode, delay = rng.choice(["unique", "unique_disorder"]), rng.choice(["0", "2"])
    elif tags.get("two_inputs") or tags.get("no_late"):
        mode, delay = "ordered", rng.choice(["0", "1", "3"])
    else:
        mode, delay = rng.choice(["ordered", "disorder", "disorder"]), rng.choice(["0", "1", "2", "5"])
    files = {"t": table_rows(rng, rng.randint(3, 22), mode)}
    ddls = [ddl("t", delay)]
    texts = {}
    if tags.get("cdc"):
        del files["t"]
        texts["t.json"] = cdc_events(rng, rng.randint(3, 25))
        ddls = ["CREATE TABLE t (id INT, k STRING, g INT, v INT, d DOUBLE, b BOOLEAN, s STRING, "
                "ts TIMESTAMP(3)) WITH ('connector' = 'filesystem', 'path' = '${DIR}/t.json', "
                "'format' = 'debezium-json')"]
    if tags.get("two_inputs"):
        files["u"] = table_rows(rng, rng.randint(2, 12), mode)
        ddls.append(ddl("u", delay))
    return {"seed": seed, "family": family, "query": query, "ddl": ddls, "delay": delay,
            "files": dict({n + ".csv": "".join(",".join(r) + "\n" for r in rows)
                           for n, rows in files.items()}, **texts),
            "tags": tags}


if __name__ == "__main__":
    import sys
    for s in sys.argv[1:] or ["1"]:
        c = case(int(s))
        print("-- seed %s (%s)" % (s, c["family"]))
        print(";\n".join(c["ddl"] + [c["query"]]) + ";")
