package backend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Cursor answers whether a store holds names under a prefix, and at what
// size, for a caller that asks in increasing order (the files of a
// catalog, in path order): it merges the asks with the store's listing a
// page at a time (PageLister), and holds one page. A name past the page
// lists a new one from that name, so asks far apart cost a request each
// (as a Stat would), asks close together a request per page of about a
// thousand names, and never more requests than pages of the whole folder,
// plus one. Where a LazyListing holds every name of the folder (850 MB at
// 10,000,000 names), a Cursor holds a page, whatever the folder's size.
//
// A name asked below the page held (out of order), a name not under the
// prefix, and every name once the store gave a page out of order (names
// below the one asked, not increasing, an empty page with more), are
// asked for alone with Stat: a page the cursor cannot trust never
// answers, and nothing makes it list again and again. A Cursor is safe
// for concurrent use; asks from several goroutines that take names in
// order answer from the page as long as they fall in it.
type Cursor struct {
	r      Reader
	l      PageLister // nil: every name is asked for with Stat
	prefix string

	mu    sync.Mutex
	page  []FileInfo // the page held, names and sizes only
	from  string     // the page answers for the names from from
	last  string     // up to last, included
	toEnd bool       // or to the end of the prefix
	held  bool       // a page is held
	stats bool       // the store gave a page out of order: Stat from now on
	pages int        // pages listed
}

// NewCursor returns a cursor over the names under prefix in r, which
// lists pages where r has a PageLister (PageListerOf) and asks for each
// name with Stat where it has none.
func NewCursor(r Reader, prefix string) *Cursor {
	return &Cursor{r: r, l: PageListerOf(r), prefix: prefix}
}

// Size says whether the store holds name, and its size.
func (c *Cursor) Size(ctx context.Context, name string) (size int64, ok bool, err error) {
	size, ok, answered, err := c.fromPage(ctx, name)
	if answered || err != nil {
		return size, ok, err
	}
	fi, err := c.r.Stat(ctx, name)
	if IsNotExist(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return fi.Size, true, nil
}

// fromPage answers for name from the page that covers it, listing that
// page first where name is past the one held; answered is false where a
// Stat must answer instead.
func (c *Cursor) fromPage(ctx context.Context, name string) (size int64, ok, answered bool, err error) {
	if c.l == nil || !strings.HasPrefix(name, c.prefix) {
		return 0, false, false, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stats || (c.held && name < c.from):
		return 0, false, false, nil
	case !c.covers(name):
		if err := c.list(ctx, name); err != nil || c.stats {
			return 0, false, false, err
		}
	}
	i, found := slices.BinarySearchFunc(c.page, name, func(fi FileInfo, name string) int { return strings.Compare(fi.Name, name) })
	if !found {
		return 0, false, true, nil
	}
	return c.page[i].Size, true, true, nil
}

// covers says whether the page held answers for name.
func (c *Cursor) covers(name string) bool {
	return c.held && name >= c.from && (c.toEnd || name <= c.last)
}

// list replaces the page held with the store's page from name. A page
// out of order turns the cursor to Stat for good; a name not under the
// prefix is an error, as it is for LazyListing.
func (c *Cursor) list(ctx context.Context, name string) error {
	page, more, err := c.l.ListPage(ctx, c.prefix, name)
	if err != nil {
		return err
	}
	c.pages++
	c.held = false
	c.page = c.page[:0]
	for i, fi := range page {
		if !strings.HasPrefix(fi.Name, c.prefix) {
			return fmt.Errorf("listing %s from %s gave %s", c.prefix, name, fi.Name)
		}
		if fi.Name < name || (i > 0 && fi.Name <= page[i-1].Name) {
			c.stats = true
			c.page = nil
			return nil
		}
		c.page = append(c.page, FileInfo{Name: fi.Name, Size: fi.Size})
	}
	if more && len(page) == 0 {
		c.stats = true
		return nil
	}
	c.held, c.from, c.toEnd = true, name, !more
	if len(page) > 0 {
		c.last = page[len(page)-1].Name
	}
	return nil
}

// Pages is how many pages the cursor listed.
func (c *Cursor) Pages() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pages
}

// Stats says whether the store gave a page out of order, so that every
// name since was asked for with Stat.
func (c *Cursor) Stats() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}
