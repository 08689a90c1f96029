// Package etcdmembers changes the member count of a tenant's etcd one
// step at a time through etcd's member API: a new member joins as a
// learner and is promoted once it has caught up, a member leaves after
// the leadership has moved off it. Each call of Step makes at most one
// change and says how many members the StatefulSet must run afterwards;
// the caller applies that and calls again (the controller on its next
// pass), so that a crash between two steps leaves etcd in a state the
// next Step picks up from the member list, which is the truth.
//
// Members are numbered as the StatefulSet's pods: member i has the peer
// URL the caller's PeerURL gives for i. Member 0 is never removed: the API
// servers use it alone while the membership changes.
package etcdmembers

import (
	"context"
	"errors"
	"fmt"
	"slices"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// MaxMembers bounds the member numbers Step recognises.
const MaxMembers = 16

// Reasons: what a step did (the Events' reasons too) or waits for.
const (
	// ReasonMemberAdded: a learner was added for the next member number;
	// its pod must start next.
	ReasonMemberAdded = "MemberAdded"
	// ReasonMemberPromoted: a learner became a voting member.
	ReasonMemberPromoted = "MemberPromoted"
	// ReasonLeaderMoved: the member to remove was the leader; member 0
	// leads now, and the next step removes it.
	ReasonLeaderMoved = "LeaderMoved"
	// ReasonMemberRemoved: a member (or a learner left from an
	// interrupted grow) was removed; its pod must go.
	ReasonMemberRemoved = "MemberRemoved"
	// ReasonWaitingForLearner: the learner is not in sync with the leader
	// yet (or not started); it is promoted once it is.
	ReasonWaitingForLearner = "WaitingForLearner"
	// ReasonWaitingForMembers: fewer members are ready than the step
	// needs to keep quorum.
	ReasonWaitingForMembers = "WaitingForMembers"
	// ReasonDone: the member list is what was asked, every member votes.
	ReasonDone = "Done"
)

// Input is what a step needs besides etcd.
type Input struct {
	// Want is the member count asked for (spec.etcd.replicas).
	Want int32
	// Ready is how many members' pods are ready now (the StatefulSet's
	// ready replicas). A step that changes the voting members needs every
	// voting member ready, and removing one needs every member ready, so
	// that quorum never drops below what is running.
	Ready int32
	// PeerURL is member i's peer URL, spelled as in the initial cluster.
	PeerURL func(i int32) string
}

// Result is what a step did and what the StatefulSet must run next.
type Result struct {
	// Members is how many members etcd has after the step, learners
	// included: the StatefulSet's replicas and the number of members the
	// initial cluster lists (a joining member must list exactly them).
	Members int32
	// Voting is how many of them vote after the step: quorum is a
	// majority of these.
	Voting int32
	// Done says the member list is Want voting members.
	Done bool
	// Reason is one of the Reason constants; Changed says the step
	// changed the membership or the leader (an Event's worth).
	Reason  string
	Changed bool
	Message string
}

// Member is one etcd member as Step sees it.
type Member struct {
	Index   int32
	ID      uint64
	Name    string
	Learner bool
	Client  []string
}

// List reads the member list (linearizable: it must not be a stale view
// of a change just made) and numbers the members by their peer URLs.
func List(ctx context.Context, cli *clientv3.Client, peerURL func(int32) string) ([]Member, error) {
	resp, err := cli.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing etcd members: %w", err)
	}
	out := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		idx, ok := indexOf(m, peerURL)
		if !ok {
			return nil, fmt.Errorf("etcd member %x (%q, peer URLs %v) is none of the StatefulSet's members: not changing the membership", m.ID, m.Name, m.PeerURLs)
		}
		out = append(out, Member{Index: idx, ID: m.ID, Name: m.Name, Learner: m.IsLearner, Client: m.ClientURLs})
	}
	slices.SortFunc(out, func(a, b Member) int { return int(a.Index - b.Index) })
	for i, m := range out {
		if m.Index != int32(i) {
			return nil, fmt.Errorf("etcd members are not numbered 0 to %d (member %d is missing): not changing the membership", len(out)-1, i)
		}
	}
	return out, nil
}

func indexOf(m *pb.Member, peerURL func(int32) string) (int32, bool) {
	for i := range int32(MaxMembers) {
		if slices.Contains(m.PeerURLs, peerURL(i)) {
			return i, true
		}
	}
	return 0, false
}

// Step makes at most one membership change towards in.Want, through cli,
// a client of member 0. In order:
//   - a learner is promoted if voting members are missing, else removed
//     (left from an interrupted grow);
//   - fewer voting members than wanted: the next member is added as a
//     learner;
//   - more than wanted: the highest-numbered member is removed, after
//     leadership moved from it to member 0 if it led.
//
// "Not in sync yet" and too few ready members are waits (a Result without
// Done, no error); errors name the member and the step.
func Step(ctx context.Context, cli *clientv3.Client, in Input) (Result, error) {
	members, err := List(ctx, cli, in.PeerURL)
	if err != nil {
		return Result{}, err
	}
	n := int32(len(members))
	if n == 0 || members[0].Learner {
		return Result{}, errors.New("etcd member 0 is not a voting member: not changing the membership")
	}
	var voting int32
	var learner *Member
	for i := range members {
		if members[i].Learner {
			learner = &members[i]
		} else {
			voting++
		}
	}
	s := &step{cli: cli, in: in, members: members, n: n, voting: voting, res: Result{Members: n, Voting: voting}}
	switch {
	case learner != nil && voting < in.Want:
		return s.promote(ctx, *learner)
	case learner != nil:
		return s.removeLearner(ctx, *learner)
	case voting < in.Want:
		return s.add(ctx)
	case voting > in.Want:
		return s.remove(ctx)
	default:
		// Done only once every member serves: the API servers go back
		// to listing all of them next.
		if s.wait(n, "finishing the change") {
			return s.res, nil
		}
		s.res.Done, s.res.Reason = true, ReasonDone
		s.res.Message = fmt.Sprintf("%d voting members", n)
		return s.res, nil
	}
}

// step is one Step: the membership it found (n members, voting of them
// voters) and the Result it builds.
type step struct {
	cli       *clientv3.Client
	in        Input
	members   []Member
	n, voting int32
	res       Result
}

// wait says whether the change (what) must wait for need ready members,
// and then sets the result's reason.
func (s *step) wait(need int32, what string) bool {
	if s.in.Ready >= need {
		return false
	}
	s.res.Reason = ReasonWaitingForMembers
	s.res.Message = fmt.Sprintf("%s needs %d ready etcd members, %d are", what, need, s.in.Ready)
	return true
}

// promote makes learner a voting member.
func (s *step) promote(ctx context.Context, learner Member) (Result, error) {
	name := memberName(learner)
	if s.wait(s.voting, "promoting "+name) {
		return s.res, nil
	}
	if _, err := s.cli.MemberPromote(ctx, learner.ID); err != nil {
		if errors.Is(err, rpctypes.ErrMemberLearnerNotReady) {
			s.res.Reason = ReasonWaitingForLearner
			s.res.Message = fmt.Sprintf("learner %s is catching up with the leader", name)
			return s.res, nil
		}
		return Result{}, fmt.Errorf("promoting learner %s: %w", name, err)
	}
	s.res.Voting = s.voting + 1
	s.res.Reason, s.res.Changed = ReasonMemberPromoted, true
	s.res.Message = fmt.Sprintf("learner %s promoted: %d of %d voting members", name, s.voting+1, s.in.Want)
	return s.res, nil
}

// removeLearner removes a learner the spec no longer needs (the spec went
// back down during a grow). Removing it changes no quorum.
func (s *step) removeLearner(ctx context.Context, learner Member) (Result, error) {
	name := memberName(learner)
	if learner.Index != s.n-1 {
		return Result{}, fmt.Errorf("removing learner %s: it is not the highest-numbered member, the StatefulSet could not drop its pod", name)
	}
	if _, err := s.cli.MemberRemove(ctx, learner.ID); err != nil {
		return Result{}, fmt.Errorf("removing learner %s: %w", name, err)
	}
	s.res.Members = s.n - 1
	s.res.Reason, s.res.Changed = ReasonMemberRemoved, true
	s.res.Message = fmt.Sprintf("learner %s removed", name)
	return s.res, nil
}

// add adds member n as a learner, only after every voting member is
// ready: the learner becomes a voter soon, and a quorum of 2 of 2 needs
// both.
func (s *step) add(ctx context.Context) (Result, error) {
	n := s.n
	url := s.in.PeerURL(n)
	if s.wait(s.voting, fmt.Sprintf("adding member %d", n)) {
		return s.res, nil
	}
	if _, err := s.cli.MemberAddAsLearner(ctx, []string{url}); err != nil {
		if unhealthy(err, &s.res) {
			return s.res, nil
		}
		return Result{}, fmt.Errorf("adding member %d (%s) as a learner: %w", n, url, err)
	}
	s.res.Members = n + 1
	s.res.Reason, s.res.Changed = ReasonMemberAdded, true
	s.res.Message = fmt.Sprintf("member %d (%s) added as a learner", n, url)
	return s.res, nil
}

// remove removes the highest-numbered voting member, after moving the
// leadership away from it.
func (s *step) remove(ctx context.Context) (Result, error) {
	n := s.n
	victim := s.members[n-1]
	name := memberName(victim)
	if victim.Index == 0 {
		return Result{}, errors.New("member 0 is never removed")
	}
	// Every member ready: removing one of three while another is
	// down would leave one of two, without quorum.
	if s.wait(n, "removing "+name) {
		return s.res, nil
	}
	st, err := s.cli.Status(ctx, s.cli.Endpoints()[0])
	if err != nil {
		return Result{}, fmt.Errorf("removing %s: reading the leader from member 0: %w", name, err)
	}
	if st.Leader == victim.ID {
		if err := moveLeader(ctx, s.cli, victim, s.members[0].ID); err != nil {
			return Result{}, fmt.Errorf("removing %s: moving the leadership to member 0: %w", name, err)
		}
		s.res.Reason, s.res.Changed = ReasonLeaderMoved, true
		s.res.Message = fmt.Sprintf("leadership moved from %s to member 0, which removes it next", name)
		return s.res, nil
	}
	if _, err := s.cli.MemberRemove(ctx, victim.ID); err != nil {
		if unhealthy(err, &s.res) {
			return s.res, nil
		}
		return Result{}, fmt.Errorf("removing %s: %w", name, err)
	}
	s.res.Members, s.res.Voting = n-1, s.voting-1
	s.res.Reason, s.res.Changed = ReasonMemberRemoved, true
	s.res.Message = fmt.Sprintf("%s removed: %d members left, %d wanted", name, n-1, s.in.Want)
	return s.res, nil
}

// unhealthy turns etcd's own quorum check into a wait: it refuses a
// change that could break quorum while the member that receives it has
// not been connected to every (for a removal: enough) voting member for
// the last 5 s, which is the case for a while after every promotion.
func unhealthy(err error, res *Result) bool {
	if !errors.Is(err, rpctypes.ErrUnhealthy) {
		return false
	}
	res.Reason = ReasonWaitingForMembers
	res.Message = "etcd refuses the change until its members have been connected for a while (unhealthy cluster)"
	return true
}

// moveLeader asks the leader, which alone can, to hand its leadership to
// transferee. cli's own connection is to member 0, so the request goes
// through a connection of its own to the leader, with cli's credentials.
func moveLeader(ctx context.Context, cli *clientv3.Client, leader Member, transferee uint64) error {
	if len(leader.Client) == 0 {
		return fmt.Errorf("the leader %s has no client URL", memberName(leader))
	}
	conn, err := cli.Dial(leader.Client[0])
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = clientv3.NewMaintenanceFromMaintenanceClient(pb.NewMaintenanceClient(conn), cli).MoveLeader(ctx, transferee)
	return err
}

func memberName(m Member) string {
	if m.Name != "" {
		return fmt.Sprintf("member %d (%s)", m.Index, m.Name)
	}
	// A learner that never started has no name yet.
	return fmt.Sprintf("member %d", m.Index)
}
