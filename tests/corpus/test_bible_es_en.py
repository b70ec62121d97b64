"""The corpus builder's cleaning and alignment (tools/corpus/bible_es_en.py) on fixed strings shaped like
diatheke's output, so no SWORD module is needed. `tools/run test` runs it and counts each test."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "corpus"))
import bible_es_en as corpus  # noqa: E402


class Cleaning(unittest.TestCase):
    def test_a_footnote_between_two_words_leaves_a_space_and_next_to_punctuation_none(self):
        self.assertEqual(corpus.markup_to_text(
            '<w savlm="strong:H0430">God</w><note placement="foot" swordFootnote="1"></note>'
            '<w savlm="strong:H1254">created</w> the earth<note swordFootnote="2"></note>.'),
            "God created the earth.")

    def test_strongs_numbers_and_all_other_tags_leave_no_trace(self):
        text = corpus.normalise(corpus.markup_to_text(
            '<w lemma="strong:H5236" savlm="strong:H5236">foreigners</w> <milestone type="line"/>and'))
        self.assertEqual(text, "foreigners and")
        self.assertNotIn("<", text)

    def test_a_quotation_edge_flush_against_two_words_is_a_word_boundary(self):
        self.assertEqual(corpus.markup_to_text('the deaf <w>hear</w>,</q><q marker=""><w>the</w> dead'),
                         "the deaf hear, the dead")
        self.assertEqual(corpus.markup_to_text('<q marker="">“<w>I</w> am'), "“I am")

    def test_an_added_word_is_its_own_word_but_an_added_pronoun_joins_its_verb(self):
        self.assertEqual(corpus.markup_to_text(
            '<w>y díjo</w><transChange type="added">le</transChange><w>Dios</w>: <w>lo que</w>'
            '<transChange type="added">quisieres que</transChange><w>yo te dé</w>'),
            "y díjole Dios: lo que quisieres que yo te dé")
        self.assertEqual(corpus.markup_to_text('<w>ellos</w><transChange type="added">le</transChange>'
                                               '<w>tentaron</w>'), "ellos le tentaron")

    def test_headings_and_speaker_labels_are_dropped_but_their_neighbours_stay_apart(self):
        self.assertEqual(corpus.normalise(corpus.markup_to_text(
            'end.<speaker>Beloved</speaker><l level="1"/>My beloved')), "end. My beloved")

    def test_the_glossary_after_the_end_of_the_book_is_cut_off(self):
        self.assertEqual(corpus.normalise(corpus.markup_to_text(
            'with all the saints. Amen. <chapter eID="Rev.22"/><div canonical="true" eID="gen1" osisID="Rev" '
            'type="book"/> <div sID="gen2" type="glossary"/> Abaddon is Hebrew for destruction.')),
            "with all the saints. Amen.")

    def test_normalise_makes_quotes_ascii_and_whitespace_single_spaces(self):
        self.assertEqual(corpus.normalise(" God\u2019s  \u201cword\u201d\t\n is\u00a0good\u200b "),
                         "God's \"word\" is good")

    def test_a_forgotten_space_after_a_comma_is_restored(self):
        self.assertEqual(corpus.markup_to_text("son of man,<w>having</w> on his head"),
                         "son of man, having on his head")

    def test_the_capitals_opening_a_chapter_are_recased_but_an_inscription_is_not(self):
        self.assertEqual(corpus.sentence_case_opening("EN el principio"), "En el principio")
        self.assertEqual(corpus.sentence_case_opening("Y ACONTECIÓ después"), "Y aconteció después")
        self.assertEqual(corpus.sentence_case_opening("DE OCHO años era"), "De ocho años era")
        self.assertEqual(corpus.sentence_case_opening("PABLO, siervo"), "Pablo, siervo")
        self.assertEqual(corpus.sentence_case_opening("SANTIDAD Á JEHOVÁ."), "SANTIDAD Á JEHOVÁ.")


EXPORT_EN = (
    '<title canonical="true" type="psalm">A Psalm by David.</title> <lg sID="g1"/>Psalms 3:1: Yahweh, how '
    '<w>my</w> adversaries!\n'
    '<title canonical="true" type="psalm">A Psalm by David.</title> <lg sID="g1"/>Psalms 3:2: Many say,\n'
    'of my soul.\n'
    'Psalms 3:3: \n'
    '(engWEB2015eb)\n')


class Parsing(unittest.TestCase):
    def test_a_psalm_title_is_kept_once_and_continuation_lines_join_their_verse(self):
        verses = corpus.parse_book(EXPORT_EN, "engWEB2015eb")
        self.assertEqual(verses, {(3, 1): "A Psalm by David. Yahweh, how my adversaries!",
                                  (3, 2): "Many say, of my soul.", (3, 3): ""})

    def test_text_before_the_first_reference_is_an_error(self):
        with self.assertRaises(ValueError):
            corpus.parse_book("stray text\nGenesis 1:1: In the beginning\n", "engWEB2015eb")


def chapter(c, lengths):
    return {(c, v + 1): "x" * n for v, n in enumerate(lengths)}


class Alignment(unittest.TestCase):
    def test_verses_pair_by_reference_and_empty_ones_drop(self):
        es = {(1, 1): "uno", (1, 2): "dos", (1, 3): "tres"}
        en = {(1, 1): "one", (1, 2): "", (1, 3): "three", (1, 4): ""}
        self.assertEqual(corpus.align(es, en), [((1, 1), "uno", "one"), ((1, 3), "tres", "three")])

    def test_a_verse_empty_only_in_spanish_drops_its_chapter_and_a_shifted_next_chapter(self):
        # Jonah's shape: the Spanish 1:3 is empty, its 2:1 holds the English 1:3, the rest of its
        # chapter 2 is one verse on.
        en = chapter(1, [40, 90, 60]) | chapter(2, [30, 120, 50, 200, 70])
        es = chapter(1, [40, 90, 0]) | chapter(2, [60, 30, 120, 50, 270])
        self.assertEqual(corpus.misaligned_chapters(es, en), {1, 2})
        self.assertEqual(corpus.align(es, en), [])

    def test_a_next_chapter_that_is_not_shifted_is_kept(self):
        en = chapter(1, [40, 90, 60]) | chapter(2, [30, 120, 50, 200, 70])
        es = chapter(1, [40, 150, 0]) | chapter(2, [30, 120, 50, 200, 70])
        self.assertEqual(corpus.misaligned_chapters(es, en), {1})
        self.assertEqual(len(corpus.align(es, en)), 5)

    def test_a_verse_empty_only_in_english_drops_alone(self):
        es = chapter(8, [50, 60, 70])
        en = chapter(8, [50, 0, 70])
        self.assertEqual(corpus.misaligned_chapters(es, en), set())
        self.assertEqual([ref for ref, _, _ in corpus.align(es, en)], [(8, 1), (8, 3)])

    def test_a_field_with_a_tab_is_refused(self):
        with self.assertRaises(ValueError):
            corpus.tsv_field("a\tb")


if __name__ == "__main__":
    unittest.main()
