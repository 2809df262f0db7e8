package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/chatd/chatd/attach"
	"github.com/chatd/chatd/media"
	"github.com/chatd/chatd/message"
	"github.com/chatd/chatd/protocol"
	"github.com/chatd/chatd/storage"
)

// Attachments over HTTP (docs/PROTOCOL.md, "Attachments"): uploads into a conversation, signed
// links, downloads. Never through the WebSocket: a file would hold a socket's writer.

// Headers of every file response: nothing uploaded may run as a page of ours. nosniff keeps the
// browser to the type we say; the CSP's sandbox makes even an HTML or SVG file opened directly an
// inert document of an opaque origin, with no script and no access to ours.
const (
	fileCSP = "default-src 'none'; sandbox"
	// uploadTimeout bounds one upload, the whole body streamed to the store: 25 MiB at 1 Mbit/s.
	uploadTimeout = 5 * time.Minute
	// maxLinkIDs bounds the files of one links request: a page's worth of images.
	maxLinkIDs = 100
)

// fileRoutes adds the attachments' endpoints, when the node keeps files.
func (s *Server) fileRoutes(mux *http.ServeMux) {
	if s.cfg.Files == nil {
		return
	}
	mux.HandleFunc("POST /api/conversations/{id}/uploads", s.authed(s.upload))
	mux.HandleFunc("POST /api/files/links", s.authed(s.fileLinks))
	mux.HandleFunc("GET /api/files/{id}", func(w http.ResponseWriter, r *http.Request) { s.download(w, r, false) })
	mux.HandleFunc("GET /api/files/{id}/thumbnail", func(w http.ResponseWriter, r *http.Request) { s.download(w, r, true) })
}

// upload stores the request's body as a pending upload of the caller in a conversation they may
// send to. The body is the file's bytes; ?name= is its name.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, userID string) {
	convID := r.PathValue("id")
	if !protocol.ValidID(convID) {
		writeError(w, http.StatusBadRequest, "invalid conversation id")
		return
	}
	files := s.cfg.Files
	if r.ContentLength > files.Config().MaxFileBytes {
		// Before reading a byte: the client learns at once, and nothing is stored.
		writeError(w, http.StatusRequestEntityTooLarge, "file larger than "+strconv.FormatInt(files.Config().MaxFileBytes, 10)+" bytes")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), uploadTimeout)
	defer cancel()
	if err := s.chat.CheckUpload(ctx, userID, convID); err != nil {
		s.refuseFileAccess(w, err, "upload")
		return
	}
	u, err := files.Upload(ctx, attach.UploadRequest{UserID: userID, ConversationID: convID, Name: r.URL.Query().Get("name"),
		Body: r.Body, Size: r.ContentLength})
	var limited *attach.RateLimitedError
	switch {
	case err == nil:
		writeJSON(w, http.StatusCreated, protocol.Upload{Attachment: message.AttachmentsView([]storage.Attachment{u.Attachment()})[0],
			CreatedAt: u.CreatedAt})
	case errors.Is(err, attach.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "file larger than "+strconv.FormatInt(files.Config().MaxFileBytes, 10)+" bytes")
	case errors.Is(err, attach.ErrBadName):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, attach.ErrBadImage):
		writeError(w, http.StatusUnprocessableEntity, "the file is an image that cannot be decoded, or has more than "+
			strconv.Itoa(files.Config().Media.MaxPixels)+" pixels")
	case errors.As(err, &limited):
		w.Header().Set("Retry-After", strconv.Itoa(int(limited.RetryAfter.Seconds())+1))
		writeError(w, http.StatusTooManyRequests, limited.Error())
	case r.Context().Err() != nil:
		// The client went away mid-upload: nothing is kept, and nobody reads an answer.
	default:
		s.log.Error().Err(err).Str("user", userID).Msg("upload")
		writeError(w, http.StatusServiceUnavailable, "could not store the file; try again")
	}
}

// refuseFileAccess answers a refusal of the chat service about a conversation's files.
func (s *Server) refuseFileAccess(w http.ResponseWriter, err error, what string) {
	var refusal *protocol.Error
	if errors.As(err, &refusal) && (errors.Is(err, protocol.ErrNotMember) || errors.Is(err, protocol.ErrForbidden)) {
		writeError(w, http.StatusForbidden, refusal.Message)
		return
	}
	s.log.Error().Err(err).Msg(what)
	writeError(w, http.StatusServiceUnavailable, "could not check the conversation; try again")
}

type linksRequest struct {
	IDs []string `json:"ids"`
}

type linksResponse struct {
	Links map[string]protocol.FileLink `json:"links"`
}

// fileLinks signs short-lived download links of the files the caller may download now; ids of
// files that do not exist or that they may not download are left out.
func (s *Server) fileLinks(w http.ResponseWriter, r *http.Request, userID string) {
	var req linksRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, maxLoginBody)).Decode(&req); err != nil || len(req.IDs) > maxLinkIDs {
		writeError(w, http.StatusBadRequest, "body must be JSON: {\"ids\": [\"...\"]}, at most "+strconv.Itoa(maxLinkIDs)+" ids")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.OpTimeout)
	defer cancel()
	out := linksResponse{Links: make(map[string]protocol.FileLink)}
	member := make(map[string]bool) // by conversation, read once per request
	for _, id := range req.IDs {
		if !protocol.ValidID(id) {
			continue
		}
		u, err := s.cfg.Files.Record(ctx, id)
		if errors.Is(err, attach.ErrNoFile) {
			continue
		}
		if err != nil {
			s.log.Error().Err(err).Msg("file links")
			writeError(w, http.StatusServiceUnavailable, "could not read the files; try again")
			return
		}
		ok, known := member[u.ConversationID]
		if !known {
			err := s.chat.CheckMember(ctx, userID, u.ConversationID)
			if err != nil && !errors.Is(err, protocol.ErrNotMember) {
				s.log.Error().Err(err).Msg("file links")
				writeError(w, http.StatusServiceUnavailable, "could not read the files; try again")
				return
			}
			ok = err == nil
			member[u.ConversationID] = ok
		}
		if ok && visibleTo(u, userID) {
			out.Links[id] = s.cfg.Files.Link(u, userID)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// visibleTo says whether a member may see an upload: once attached, every member; while
// pending, only its uploader.
func visibleTo(u storage.Upload, userID string) bool {
	return u.ClientMsgID != "" || u.UploaderID == userID
}

// download serves a file or its thumbnail to a current member of its conversation, who shows
// who they are with a signed link (?u=&exp=&sig=, what an <img> can carry) or a bearer token.
func (s *Server) download(w http.ResponseWriter, r *http.Request, thumbnail bool) {
	id := r.PathValue("id")
	var userID string
	if r.URL.Query().Has("sig") {
		var err error
		if userID, err = s.cfg.Files.VerifyLink(id, thumbnail, r.URL.Query()); err != nil {
			s.seclog.refused(eventToken, r, "", "file link: "+err.Error())
			writeError(w, http.StatusForbidden, "link invalid or expired")
			return
		}
		// A link is for the user it was signed for: someone else presenting their own token
		// with it is refused.
		if requestToken(r) != "" {
			other, refused := s.check(r)
			if refused != nil || other != userID {
				writeError(w, http.StatusForbidden, "this link is not yours")
				return
			}
		}
	} else {
		var refused *refusal
		if userID, refused = s.check(r); refused != nil {
			writeError(w, refused.status, refused.msg)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), uploadTimeout)
	defer cancel()
	f, ok := s.openFile(ctx, w, userID, id, thumbnail)
	if !ok {
		return
	}
	defer f.Body.Close() // read only
	h := w.Header()
	h.Set("Content-Type", f.Info.ContentType)
	h.Set("Content-Length", strconv.FormatInt(f.Info.Size, 10))
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", fileCSP)
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Cache-Control", "private, max-age=60")
	// Inline only for the clean copies the server made of images (they have a size); anything
	// else, whatever its type, is a download.
	disposition := "attachment"
	if (thumbnail || f.Upload.Width > 0) && media.IsInlineImage(f.Info.ContentType) {
		disposition = "inline"
	}
	if v := mime.FormatMediaType(disposition, map[string]string{"filename": f.Upload.Name}); v != "" {
		disposition = v
	}
	h.Set("Content-Disposition", disposition)
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, f.Body) // a failed copy means the client went away
}

// openFile opens a file (or its thumbnail) for a user who may download it, or answers why not.
func (s *Server) openFile(ctx context.Context, w http.ResponseWriter, userID, id string, thumbnail bool) (attach.File, bool) {
	u, err := s.cfg.Files.Record(ctx, id)
	var f attach.File
	if err == nil && !visibleTo(u, userID) {
		err = attach.ErrNoFile
	}
	if err == nil {
		if err = s.chat.CheckMember(ctx, userID, u.ConversationID); err != nil {
			s.refuseFileAccess(w, err, "download")
			return f, false
		}
		f, err = s.cfg.Files.Open(ctx, u, thumbnail)
	}
	switch {
	case errors.Is(err, attach.ErrNoFile):
		writeError(w, http.StatusNotFound, "no such file")
		return f, false
	case err != nil:
		s.log.Error().Err(err).Msg("download")
		writeError(w, http.StatusServiceUnavailable, "could not read the file; try again")
		return f, false
	}
	return f, true
}
