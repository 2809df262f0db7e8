package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/uuid"

	"github.com/chatd/chatd/protocol"
)

// Upload is a pending upload as the server answers it: name its ID in a send to attach it.
type Upload = protocol.Upload

// HTTPError is an HTTP API refusal: its status and the server's error text.
type HTTPError struct {
	Status  int
	Message string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("%d %s", e.Status, e.Message) }

// UploadFile uploads a file of size bytes (-1 if unknown) named name into a conversation, with
// the token of its uploader, and returns the pending upload. A refusal is an *HTTPError.
func UploadFile(ctx context.Context, httpClient *http.Client, baseURL, token, conversationID, name string, body io.Reader, size int64) (Upload, error) {
	u := strings.TrimSuffix(baseURL, "/") + "/api/conversations/" + url.PathEscape(conversationID) + "/uploads?name=" + url.QueryEscape(name)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, body)
	if err != nil {
		return Upload{}, fmt.Errorf("upload %s: %w", name, err)
	}
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/octet-stream")
	var up Upload
	if err := doJSON(httpClient, req, http.StatusCreated, &up); err != nil {
		return Upload{}, fmt.Errorf("upload %s: %w", name, err)
	}
	return up, nil
}

// Link is a signed download link of a file and of its thumbnail, as the server answers them.
type Link = protocol.FileLink

// FileLinks asks for signed download links of files; those the user may not download are left
// out of the answer.
func FileLinks(ctx context.Context, httpClient *http.Client, baseURL, token string, ids []string) (map[string]Link, error) {
	body, err := json.Marshal(map[string][]string{"ids": ids})
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(baseURL, "/")+"/api/files/links", strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	var out struct {
		Links map[string]Link `json:"links"`
	}
	if err := doJSON(httpClient, req, http.StatusOK, &out); err != nil {
		return nil, fmt.Errorf("file links: %w", err)
	}
	return out.Links, nil
}

// Download opens a file with the token of a member: the caller reads and closes the body. A
// refusal is an *HTTPError.
func Download(ctx context.Context, httpClient *http.Client, baseURL, token, fileID string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(baseURL, "/")+"/api/files/"+url.PathEscape(fileID), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := orDefault(httpClient).Do(req)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", fileID, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		return nil, fmt.Errorf("download %s: %w", fileID, httpError(resp))
	}
	return resp, nil
}

// SendFiles sends a message carrying uploads (with or without text) and waits for its ack.
func (c *Conn) SendFiles(ctx context.Context, conversationID, body string, uploadIDs []string) (protocol.ServerFrame, error) {
	return c.Request(ctx, protocol.ClientFrame{Type: protocol.TypeSend, ConversationID: conversationID,
		ClientMsgID: uuid.NewString(), Body: body, Attachments: uploadIDs})
}

func orDefault(c *http.Client) *http.Client {
	if c == nil {
		return http.DefaultClient
	}
	return c
}

// doJSON runs req and decodes a reply of status want into out, or returns an *HTTPError.
func doJSON(httpClient *http.Client, req *http.Request, want int, out any) error {
	resp, err := orDefault(httpClient).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		return httpError(resp)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// httpError reads an API refusal's {"error": "..."} body.
func httpError(resp *http.Response) error {
	var e struct {
		Error string `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10)) // the status says enough if this fails
	if json.Unmarshal(data, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(data))
	}
	return &HTTPError{Status: resp.StatusCode, Message: e.Error}
}
