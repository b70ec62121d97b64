#!/usr/bin/python3
"""Builds the Spanish-English Bible corpus from Debian's SWORD modules (run by `tools/run corpus bible-es-en`).

Reads the Reina-Valera 1909 (sword-text-sparv, module spaRV1909eb) and the World English Bible
(sword-text-web, module engWEB2015eb) through diatheke, one book at a time, aligns the verses by
reference (book, chapter, verse) and writes, under --out (default data/):
  bible-es-en/train.tsv, valid.tsv, test.tsv   `spanish<TAB>english`, one verse pair a line
  bible-es-en/test-src.txt, test-ref.txt        the two sides of test.tsv as line-aligned plain files
                                                (for `tapegrad score --ref ... --hyp ...`)
  bible-en.txt                                  every English verse of the 66 books, one a line, in
                                                canonical order (for language modelling)
The split is by book (VALID_BOOKS, TEST_BOOKS; the rest is training), so no held-out verse has a
neighbouring verse in training; it spans both testaments, prose and poetry.

Why the export is done this way (each is a trap that silently damages the text):
  * Book by book: a whole-range export stops at the first psalm title (Psalms 2:12). Each book's
    references must be the same on both sides, and the total near the 31,102 verses of the KJV
    versification both modules use, or the build fails.
  * The module's own markup (`-f internal`) with footnotes kept (`-o f`), parsed here, not `-f plain`:
    the plain filter deletes a footnote together with the space it stood for ("Godcreated the
    heavens") and can leave Strong's tags (<H5236>) behind; neither can be repaired afterwards. Here a
    footnote becomes a word boundary unless punctuation or a space already is one.
  * The World English Bible's glossary follows the last verse of Revelation in the same entry: text
    after the end-of-book marker is dropped.
  * Psalm titles: the Spanish module has them as the start of the first verse (and Psalm 119's stanza
    letters, ALEPH, BETH, at the start of verses 1, 9, ...); the English module has them as a heading
    that diatheke repeats before every verse of the psalm. The English title is kept once, at the
    start of the verse where it first appears in the chapter, so both sides say the same thing.
    Section headings and the Song of Solomon's speaker labels are not scripture and are dropped.
  * Versification: the Reina-Valera keeps its printed verse numbers inside the KJV scheme, so in a few
    chapters (misaligned_chapters) a Spanish verse is empty and the verses around it are merged or
    shifted by one against the English (Jonah 1:17 is its 2:1). Aligning by reference alone pairs the
    wrong verses there (the 31,077 pairs of a naive alignment); those chapters are left out whole.
Cleaning then unescapes entities, normalises to NFC, typographic quotes to ASCII (“ ” -> ", ‘ ’ -> ')
and every run of whitespace to one space. Verses empty on either side are dropped (the World English
Bible leaves verses such as Matthew 17:21 empty where its source text omits them).

Python 3 standard library only; the same modules give byte-identical files on every run; each file is
written to a temporary name and renamed, so an interrupted run never leaves half a file.
Exits 2 with one line on stderr if diatheke or a module is missing or a book comes back empty.
"""
import argparse
import html
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unicodedata

SPANISH_MODULE = "spaRV1909eb"
ENGLISH_MODULE = "engWEB2015eb"
KJV_VERSE_COUNT = 31102  # both modules use the KJV versification

# The 66 books in canonical order, by OSIS name (what diatheke's -k accepts), with their testament.
OLD_TESTAMENT = ("Gen Exod Lev Num Deut Josh Judg Ruth 1Sam 2Sam 1Kgs 2Kgs 1Chr 2Chr Ezra Neh Esth Job Ps "
                 "Prov Eccl Song Isa Jer Lam Ezek Dan Hos Joel Amos Obad Jonah Mic Nah Hab Zeph Hag Zech "
                 "Mal").split()
NEW_TESTAMENT = ("Matt Mark Luke John Acts Rom 1Cor 2Cor Gal Eph Phil Col 1Thess 2Thess 1Tim 2Tim Titus "
                 "Phlm Heb Jas 1Pet 2Pet 1John 2John 3John Jude Rev").split()
BOOKS = OLD_TESTAMENT + NEW_TESTAMENT

# Held-out books. Each split holds about 4% of the pairs, both testaments, narrative, poetry and
# letters: valid = Ruth (OT narrative), Ecclesiastes (wisdom), Hosea (prophetic poetry), Mark (gospel),
# Philippians (letter); test = Judges (OT narrative), Lamentations (poetry), Micah (prophetic poetry),
# Romans and 1 John (letters).
VALID_BOOKS = ("Ruth", "Eccl", "Hos", "Mark", "Phil")
TEST_BOOKS = ("Judg", "Lam", "Mic", "Rom", "1John")

# ---------------------------------------------------------------------------------------------------
# Cleaning: one verse's markup -> plain text. Pure functions (tests/corpus/test_bible_es_en.py).

# Elements whose content is not the verse's text: headings that are not psalm titles, speaker labels.
DROPPED_ELEMENTS = re.compile(r"<(title|speaker)\b[^>]*>.*?</\1>", re.S)
NOTE = re.compile(r"<note\b[^>]*/>|<note\b[^>]*>.*?</note>", re.S)
END_OF_BOOK = re.compile(r'<div\b(?=[^>]*\beID=)(?=[^>]*\btype="book")[^>]*/>')
TAG_RUN = re.compile(r"(?:<[^>]*>)+")
# Line, paragraph and chapter milestones always stand between words.
BREAK_TAG = re.compile(r"</?(?:l|lg|lb|div|chapter|milestone|p|item|list)\b")
# A footnote, a quotation's edge or a translator's addition stands where a space was, unless a space or
# punctuation is already there (the modules put them flush against the words: "God<note/>created",
# "world.</q><q>He", "Rehum</w><transChange>y</transChange>").
BOUNDARY_TAG = re.compile(r"</?(?:note|q|transChange)\b")
WORD_BOUNDARY = "\x00"
NO_SPACE_BEFORE = set(",.;:!?)]”’'\"-—")
NO_SPACE_AFTER = set("([“‘¿¡'\"-—")
# A pronoun the Reina-Valera adds to a verb is written onto it (díjo<added>le</added> -> díjole), but
# not after these words, which are no verbs ("ellos le tentaron", "no lo hizo", "Dios lo permitiere"):
# of the module's ~170 added pronouns flush against a word, these are the ones after a non-verb.
CLITIC = re.compile(r"(\w+)((?:</w>)?<transChange\b[^>]*>)(le|la|lo|les|las|los|me|te|se|nos|os)(?=</transChange>)")
NOT_A_VERB = {"no", "y", "que", "como", "cuánto", "ellos", "os", "gentes", "jehová", "dios", "josué"}
# ",word" only where a source forgot the space ("man,having").
PUNCTUATION_THEN_LETTER = re.compile(r"([,;:])(?=[^\W\d_])")
QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "«": '"', "»": '"', "‘": "'", "’": "'", "‚": "'"})
INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))


def join_clitics(markup):
    """Writes an added enclitic pronoun onto the verb before it (see CLITIC)."""
    def join(m):
        if m.group(1).lower() in NOT_A_VERB:
            return m.group(0)
        return m.group(1) + m.group(3)
    return CLITIC.sub(join, markup)


def tag_run_replacement(run):
    """What a run of adjacent tags leaves in the text: a space, a WORD_BOUNDARY or nothing (<w> only)."""
    if BREAK_TAG.search(run):
        return " "
    return WORD_BOUNDARY if BOUNDARY_TAG.search(run) else ""


def resolve_word_boundaries(text):
    """Each WORD_BOUNDARY becomes a space where it separates two words, nothing where a space or
    punctuation already separates them ("God|created" -> "God created", "earth|." -> "earth.")."""
    out = []
    for i, ch in enumerate(text):
        if ch != WORD_BOUNDARY:
            out.append(ch)
            continue
        before = out[-1] if out else ""
        after = text[i + 1:].lstrip(WORD_BOUNDARY)[:1]
        if before and after and not before.isspace() and not after.isspace() \
                and before not in NO_SPACE_AFTER and after not in NO_SPACE_BEFORE:
            out.append(" ")
    return "".join(out)


def markup_to_text(markup):
    """A verse's OSIS markup (as `diatheke -f internal -o f` prints it) -> its words, not yet normalised."""
    end = END_OF_BOOK.search(markup)
    if end:
        markup = markup[:end.start()]
    markup = DROPPED_ELEMENTS.sub(" ", markup)
    markup = NOTE.sub("<note/>", markup)
    markup = join_clitics(markup)
    markup = TAG_RUN.sub(lambda m: tag_run_replacement(m.group(0)), markup)
    text = html.unescape(resolve_word_boundaries(markup))
    return PUNCTUATION_THEN_LETTER.sub(r"\1 ", text)


def normalise(text):
    """NFC, typographic quotes to ASCII, invisible characters removed, whitespace runs to one space."""
    text = unicodedata.normalize("NFC", text).translate(QUOTES).translate(INVISIBLE)
    return " ".join(text.split())


# ---------------------------------------------------------------------------------------------------
# Parsing one book's export: lines "<prefix markup>Book C:V: <verse markup>", continuation lines
# (no reference) belong to the verse before, the last line is "(module)".

PSALM_TITLE = re.compile(r"<title\b[^>]*>(.*?)</title>", re.S)
# Before the reference: only tags and psalm titles.
LINE_PREFIX = re.compile(r"(?:\s|<title\b[^>]*>.*?</title>|<[^>]*>)*")
REFERENCE = re.compile(r"((?:[1-3]|I{1,3})? ?[A-Z][A-Za-z]*(?: [A-Za-z]+)*) (\d+):(\d+): ?")


def parse_book(export, module):
    """diatheke's export of one book -> {(chapter, verse): text}, in the export's order. A psalm title
    (before the reference) is kept at the first verse of its chapter that carries it."""
    lines = export.rstrip("\n").split("\n")
    if lines and lines[-1].strip() == f"({module})":
        lines.pop()
    book_name = None
    markup = {}  # (chapter, verse) -> [title, body]
    last_title = {}
    for line in lines:
        prefix = LINE_PREFIX.match(line)
        m = REFERENCE.match(line, prefix.end())
        if m and book_name is None:
            book_name = m.group(1)
        if m and m.group(1) == book_name:
            reference = (int(m.group(2)), int(m.group(3)))
            if reference in markup:
                raise ValueError(f"{module}: {book_name} {reference[0]}:{reference[1]} appears twice")
            title = " ".join(t.strip() for t in PSALM_TITLE.findall(prefix.group(0)))
            new_title = title and last_title.get(reference[0]) != title
            last_title[reference[0]] = title
            markup[reference] = [title if new_title else "", line[m.end():]]
        elif markup:
            markup[next(reversed(markup))][1] += "\n" + line
        elif line.strip():
            raise ValueError(f"{module}: text before the first verse reference: {line[:60]!r}")
    return {reference: normalise(markup_to_text(title) + " " + markup_to_text(body))
            for reference, (title, body) in markup.items()}


def length_mismatch(spanish, english, chapter, shift, ratio):
    """Mean |log(spanish length / (ratio * english length))| over a chapter's verses, the Spanish verse v
    against the English verse v + shift: small where the pairing is right."""
    costs = [abs(math.log(len(es) / (ratio * len(english[(c, v + shift)]))))
             for (c, v), es in spanish.items()
             if c == chapter and es and english.get((c, v + shift))]
    return sum(costs) / len(costs) if costs else math.inf


def misaligned_chapters(spanish, english):
    """Chapters of one book whose verse numbers do not pair the same text. The Reina-Valera keeps its
    printed numbering inside the KJV scheme; where the two differ one of its verses is empty (it holds
    two verses' text elsewhere) and the verses around it are merged or shifted against the English: to
    the end of that chapter (2 Corinthians 13:13-14 are its 13:13) and, when the empty verse is a
    chapter's last, often through the next chapter (Jonah 1:17 is its 2:1, every verse of its chapter 2
    is one on; Job 38:39-41 are its 39:1-3). Such a chapter is left out whole, the next one too when shifting it by the verses moved
    matches the verse lengths better (by a fifth) than the pairing by number. A verse empty only in the
    English (the World English Bible omits Acts 8:37) shifts nothing and is dropped alone."""
    lengths = [(len(es), len(english[r])) for r, es in spanish.items() if es and english.get(r)]
    ratio = sum(e for e, _ in lengths) / max(sum(n for _, n in lengths), 1)
    chapters = set()
    for (chapter, verse), en in english.items():
        if not en or spanish.get((chapter, verse)):
            continue
        chapters.add(chapter)
        if any(c == chapter and v > verse for c, v in english):
            continue  # not the chapter's last verse
        moved = 1  # how many verses at the chapter's end the next Spanish chapter holds
        while (chapter, verse - moved) in english and not spanish.get((chapter, verse - moved)):
            moved += 1
        if length_mismatch(spanish, english, chapter + 1, -moved, ratio) < \
                0.8 * length_mismatch(spanish, english, chapter + 1, 0, ratio):
            chapters.add(chapter + 1)
    return chapters


def align(spanish, english):
    """Verse pairs (reference, spanish, english) for the references both sides have with text, in
    Spanish order, leaving out misaligned_chapters."""
    skip = misaligned_chapters(spanish, english)
    return [(ref, es, english[ref]) for ref, es in spanish.items()
            if es and english.get(ref) and ref[0] not in skip]


def sentence_case_opening(text):
    """The Reina-Valera prints the first word or words of each chapter in capitals ("EN el principio",
    "DE OCHO años", "Y ACONTECIÓ"): the first run of all-capitals words that a word not in capitals
    follows is recased as a sentence would have it ("En el principio", "De ocho años", "Y aconteció")."""
    for m in re.finditer(r"[^\W\d_]{2,}(?:\s+[^\W\d_]+)*", text):
        words = m.group(0).split()
        capitals = 0
        while capitals < len(words) and words[capitals].isupper():
            capitals += 1
        if capitals == 0:
            continue
        if capitals == len(words):
            following = re.match(r"\W*([^\W\d_]+)", text[m.end():])
            if not following or following.group(1).isupper():
                continue  # an inscription in capitals, or capitals up to the end
        run = " ".join(words[:capitals])
        after_a_word = re.search(r"[^\W\d_]\s+$", text[:m.start()]) is not None  # "Y ACONTECIÓ"
        recased = run.lower() if after_a_word else run[0] + run[1:].lower()
        start = m.start()
        end = start + len(re.match(r"[^\W\d_]+(?:\s+[^\W\d_]+){%d}" % (capitals - 1), text[start:]).group(0))
        return text[:start] + recased + text[end:]
    return text


def tsv_field(text):
    """A field for a TSV line: no tabs or newlines inside (normalise already guarantees it)."""
    if "\t" in text or "\n" in text or "\r" in text:
        raise ValueError(f"field with a tab or newline: {text[:60]!r}")
    return text


# ---------------------------------------------------------------------------------------------------

def fail(message):
    print(f"tools/run corpus bible-es-en: {message}", file=sys.stderr)
    sys.exit(2)


def export_book(module, book):
    result = subprocess.run(["diatheke", "-b", module, "-f", "internal", "-o", "f", "-k", book],
                            capture_output=True, text=True, encoding="utf-8")
    if result.returncode != 0:
        fail(f"diatheke -b {module} -k {book} exited {result.returncode}: {result.stderr.strip()[:200]}")
    return result.stdout


def check_modules():
    if shutil.which("diatheke") is None:
        fail("diatheke is not installed (apt-get install diatheke sword-text-sparv sword-text-web)")
    listing = subprocess.run(["diatheke", "-b", "system", "-k", "modulelist"], capture_output=True,
                             text=True).stdout
    for module, package in ((SPANISH_MODULE, "sword-text-sparv"), (ENGLISH_MODULE, "sword-text-web")):
        if not re.search(rf"^{module} :", listing, re.M):
            fail(f"SWORD module {module} is not installed (apt-get install {package})")


def write_atomically(path, lines):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line + "\n")
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="data", help="output folder (default data)")
    args = parser.parse_args()
    check_modules()

    pairs = {book: [] for book in BOOKS}
    english_text = []
    references = {SPANISH_MODULE: 0, ENGLISH_MODULE: 0}
    left_out = []
    for book in BOOKS:
        sides = {}
        for module in (SPANISH_MODULE, ENGLISH_MODULE):
            try:
                verses = parse_book(export_book(module, book), module)
            except ValueError as e:
                fail(f"{book}: {e}")
            if not any(verses.values()):
                fail(f"{module} gave no verses for {book} (is the module complete?)")
            references[module] += len(verses)
            sides[module] = verses
        es, en = sides[SPANISH_MODULE], sides[ENGLISH_MODULE]
        es = {(c, v): sentence_case_opening(text) if v == 1 else text for (c, v), text in es.items()}
        # The same versification on both sides: a reference missing on one side means a truncated export.
        missing = [r for r in es if r not in en] + [r for r in en if r not in es and en[r]]
        if missing:
            c, v = missing[0]
            fail(f"{book} {c}:{v} is in one module's export and not the other's ({len(missing)} such verses)")
        pairs[book] = align(es, en)
        left_out += [f"{book} {c}" for c in sorted(misaligned_chapters(es, en))]
        english_text += [text for text in en.values() if text]
    for module, count in references.items():
        if abs(count - KJV_VERSE_COUNT) > 10:
            fail(f"{module}: {count} verse references, expected about {KJV_VERSE_COUNT} (export truncated?)")

    split_of = {book: "valid" for book in VALID_BOOKS} | {book: "test" for book in TEST_BOOKS}
    splits = {"train": [], "valid": [], "test": []}
    for book in BOOKS:
        splits[split_of.get(book, "train")] += pairs[book]
    corpus = os.path.join(args.out, "bible-es-en")
    for name, rows in splits.items():
        write_atomically(os.path.join(corpus, name + ".tsv"),
                         (tsv_field(es) + "\t" + tsv_field(en) for _, es, en in rows))
    write_atomically(os.path.join(corpus, "test-src.txt"), (es for _, es, _ in splits["test"]))
    write_atomically(os.path.join(corpus, "test-ref.txt"), (en for _, _, en in splits["test"]))
    text_path = os.path.join(args.out, "bible-en.txt")
    write_atomically(text_path, english_text)

    total = sum(len(rows) for rows in splits.values())
    print(f"verse references: {references[SPANISH_MODULE]} Spanish, {references[ENGLISH_MODULE]} English; "
          f"{total} aligned pairs; {len(left_out)} chapters left out as misaligned: {', '.join(left_out)}")
    for name, rows in splits.items():
        books = " ".join(VALID_BOOKS if name == "valid" else TEST_BOOKS if name == "test" else ("(the rest)",))
        print(f"  {corpus}/{name}.tsv: {len(rows)} pairs ({100 * len(rows) / total:.1f}%) {books}")
    print(f"  {text_path}: {len(english_text)} verses, {os.path.getsize(text_path)} bytes")


if __name__ == "__main__":
    main()
