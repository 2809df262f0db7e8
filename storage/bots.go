package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Bot accounts: a user whose token an operator issued. botTokens is keyed by the token's SHA-256
// (the token itself is never stored), bots by the user, naming their one current token.
const (
	botsCollection      = "bots"
	botTokensCollection = "botTokens"
)

// BotToken is what a bot token's hash is stored with: whose it is, and when it was issued (a
// revocation of the account refuses tokens issued before it, as for every token).
type BotToken struct {
	UserID   string    `bson:"userId"`
	IssuedAt time.Time `bson:"issuedAt"`
}

type botDoc struct {
	TokenHash string    `bson:"tokenHash"`
	IssuedAt  time.Time `bson:"issuedAt"`
}

// IssueBotToken makes tokenHash the one token of the bot userID: the token it had before is
// deleted first, so it is refused from then on.
func (s *Store) IssueBotToken(ctx context.Context, userID, tokenHash string, at time.Time) (err error) {
	defer s.metrics.observe(opIssueBotToken, time.Now(), &err)
	bots, tokens := s.pushCollection(botsCollection), s.pushCollection(botTokensCollection)
	old, err := findByID[botDoc](ctx, bots, userID)
	switch {
	case err == nil:
		if _, err := tokens.DeleteOne(ctx, bson.D{{Key: "_id", Value: old.TokenHash}}); err != nil {
			return fmt.Errorf("delete the old token of bot %s: %w", userID, err)
		}
	case !errors.Is(err, ErrNotFound):
		return fmt.Errorf("read bot %s: %w", userID, err)
	}
	if _, err := tokens.InsertOne(ctx, bson.D{{Key: "_id", Value: tokenHash}, {Key: "userId", Value: userID}, {Key: "issuedAt", Value: at}}); err != nil {
		return fmt.Errorf("store the token of bot %s: %w", userID, err)
	}
	if _, err := bots.ReplaceOne(ctx, bson.D{{Key: "_id", Value: userID}}, botDoc{TokenHash: tokenHash, IssuedAt: at},
		options.Replace().SetUpsert(true)); err != nil {
		return fmt.Errorf("store bot %s: %w", userID, err)
	}
	return nil
}

// BotTokenOf returns whose token has the hash tokenHash, or ErrNotFound.
func (s *Store) BotTokenOf(ctx context.Context, tokenHash string) (_ BotToken, err error) {
	defer s.metrics.observe(opBotTokenOf, time.Now(), &err)
	return findByID[BotToken](ctx, s.pushCollection(botTokensCollection), tokenHash)
}

// deleteBotOf removes a bot's token and its record; a user who is no bot has neither.
func (s *Store) deleteBotOf(ctx context.Context, userID string) error {
	bots := s.pushCollection(botsCollection)
	bot, err := findByID[botDoc](ctx, bots, userID)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("read bot %s: %w", userID, err)
	}
	if _, err := s.pushCollection(botTokensCollection).DeleteOne(ctx, byID(bot.TokenHash)); err != nil {
		return fmt.Errorf("delete the token of bot %s: %w", userID, err)
	}
	if _, err := bots.DeleteOne(ctx, byID(userID)); err != nil {
		return fmt.Errorf("delete bot %s: %w", userID, err)
	}
	return nil
}
