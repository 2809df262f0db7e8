package search

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/keyword"
	"github.com/blevesearch/bleve/v2/analysis/char/asciifolding"
	"github.com/blevesearch/bleve/v2/analysis/lang/ar"
	"github.com/blevesearch/bleve/v2/analysis/lang/cjk"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	unicodetokenizer "github.com/blevesearch/bleve/v2/analysis/tokenizer/unicode"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/registry"
	"golang.org/x/text/unicode/norm"
)

// Field names of a message's document.
const (
	fieldConversation = "conversation"
	fieldSeq          = "seq"
	fieldSender       = "sender"
	fieldCreated      = "created"
	fieldBody         = "body"
)

// Names of the analysis parts this package adds to Bleve's.
const (
	bodyAnalyzer  = "chatd_body"
	foldFilter    = "chatd_fold"
	unigramBigram = "chatd_cjk_unigram_bigram"
)

// document is what Bleve indexes of a message; Bleve reads the json names.
type document struct {
	Conversation string `json:"conversation"`
	Seq          int64  `json:"seq"`
	Sender       string `json:"sender"`
	Created      int64  `json:"created"` // Unix milliseconds, as exact as the store keeps times; a Bleve date would come back in whole seconds
	Body         string `json:"body"`
}

// newMapping maps a message's document: the ids as exact keywords (for the membership filter and
// the deletions of a sender or a conversation), seq and creation time only stored (the document id sorts), the
// body analysed, stored and with term vectors (the highlighter reads both). Nothing goes into
// Bleve's catch-all "_all" field or is mapped dynamically: each would index every message again.
func newMapping() (*mapping.IndexMappingImpl, error) {
	m := mapping.NewIndexMapping()
	if err := m.AddCustomTokenFilter(unigramBigram, map[string]any{
		"type": cjk.BigramName,
		// Unigrams too, so a one-character word (猫, 本) is found; a longer word needs all of its
		// characters and bigrams (the query's words are joined with AND).
		"output_unigram": true,
	}); err != nil {
		return nil, fmt.Errorf("search mapping: %w", err)
	}
	if err := m.AddCustomAnalyzer(bodyAnalyzer, map[string]any{
		"type":      custom.Name,
		"tokenizer": unicodetokenizer.Name, // UAX #29 words; Han and kana come out one character at a time
		"token_filters": []string{
			cjk.WidthName,    // full-width Latin and half-width kana to their usual forms
			lowercase.Name,   // case, in every script that has it
			foldFilter,       // accents
			ar.NormalizeName, // Arabic diacritics (harakat), tatweel and letter variants
			ar.StemmerName,   // Arabic's attached article and conjunctions (بالعالم is ب+ال+عالم)
			unigramBigram,    // Han and kana runs into unigrams and bigrams
		},
	}); err != nil {
		return nil, fmt.Errorf("search mapping: %w", err)
	}

	keywordField := func() *mapping.FieldMapping {
		f := mapping.NewKeywordFieldMapping()
		f.Analyzer = keyword.Name
		f.Store = true
		f.IncludeInAll = false
		f.DocValues = false
		return f
	}
	// Seq and time are only returned with a hit: the document id carries them for sorting.
	storedNumber := func() *mapping.FieldMapping {
		f := mapping.NewNumericFieldMapping()
		f.Index = false
		f.DocValues = false
		f.IncludeInAll = false
		return f
	}
	body := mapping.NewTextFieldMapping()
	body.Analyzer = bodyAnalyzer
	body.IncludeInAll = false
	body.IncludeTermVectors = true
	body.DocValues = false

	doc := mapping.NewDocumentStaticMapping()
	doc.AddFieldMappingsAt(fieldConversation, keywordField())
	doc.AddFieldMappingsAt(fieldSender, keywordField())
	doc.AddFieldMappingsAt(fieldSeq, storedNumber())
	doc.AddFieldMappingsAt(fieldCreated, storedNumber())
	doc.AddFieldMappingsAt(fieldBody, body)
	m.DefaultMapping = doc
	m.IndexDynamic = false
	m.StoreDynamic = false
	m.DocValuesDynamic = false
	return m, nil
}

// fold removes accents from a token: Bleve's ASCII folding for Latin (é, ü, ß, ł, ø), then the
// combining marks of Greek, Cyrillic and Hebrew letters (tonos, ё and й, niqqud). Bleve has ASCII
// folding only as a character filter, which changes the text's length before the tokenizer and so
// shifts every highlight after an accent; as a token filter it leaves offsets on the original.
// Marks are kept on other scripts, where they are not accents: a Japanese dakuten (が) or an Indic
// vowel sign changes the word.
type fold struct {
	ascii *asciifolding.AsciiFoldingFilter
}

func (f fold) Filter(tokens analysis.TokenStream) analysis.TokenStream {
	for _, t := range tokens {
		if isASCII(t.Term) {
			continue
		}
		t.Term = f.ascii.Filter(t.Term)
		if !isASCII(t.Term) {
			t.Term = stripAccentMarks(t.Term)
		}
	}
	return tokens
}

func stripAccentMarks(term []byte) []byte {
	decomposed := norm.NFD.Bytes(term)
	out := make([]byte, 0, len(decomposed))
	var base rune
	for i := 0; i < len(decomposed); {
		r, n := utf8.DecodeRune(decomposed[i:])
		switch {
		case !unicode.Is(unicode.Mn, r):
			base = r
		case unicode.In(base, unicode.Greek, unicode.Cyrillic, unicode.Hebrew):
			i += n
			continue
		}
		out = append(out, decomposed[i:i+n]...)
		i += n
	}
	return norm.NFC.Bytes(out)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func init() {
	// Bleve finds analysis parts by name in a process-wide registry.
	err := registry.RegisterTokenFilter(foldFilter, func(map[string]any, *registry.Cache) (analysis.TokenFilter, error) {
		return fold{ascii: asciifolding.New()}, nil
	})
	if err != nil {
		panic(err)
	}
}
